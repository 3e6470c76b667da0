//! A real Kubernetes control plane on this host, from the programs
//! `harness/scripts/ensure-kind.sh` builds (`kind/pins.env`): etcd, kube-apiserver,
//! kube-controller-manager (the controllers an API client sees: service accounts, namespace
//! deletion, garbage collection, quota, Jobs, the root CA, claim binding) and kube-scheduler.
//! No kubelet: Pods are admitted, defaulted, scheduled onto the Nodes a test registers, and
//! stay Pending.
//!
//! One per test binary ([`shared`]), a namespace per test: a start costs seconds, a namespace
//! nothing. Its processes are started through `setpriv --pdeathsig KILL` by a thread that
//! lives as long as the test process, so they die with it, also when a test panics or the
//! binary is killed; their folder (certificates, etcd's data, the logs) is below the
//! temporary folder, named by the test process's pid, and a later start removes the folders
//! of processes that are gone.
//!
//! Its admin is a static token in `system:masters` (`--token-auth-file`), written into the
//! kubeconfig as the cluster double's is, so the same tests open either.

use anyhow::{Context, bail};
use kandev_harness::host::kube_build::Pins;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The context (and cluster and user) name in the kubeconfig [`start`] writes.
pub const CONTEXT: &str = "real-api-server";

/// How long the control plane may take to answer ready (seconds on this 2-core machine).
const READY_WITHIN: Duration = Duration::from_secs(90);

/// A running control plane: its kubeconfig, and the processes (killed on drop).
pub struct RealApiServer {
    pub kubeconfig: PathBuf,
    pub context: String,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    /// The API server's `gitVersion` (`/version`).
    pub version: String,
    pub admin_token: String,
    /// The folder of its certificates, etcd's data and the processes' logs.
    pub folder: PathBuf,
    processes: Mutex<Vec<(String, Child)>>,
}

impl Drop for RealApiServer {
    fn drop(&mut self) {
        let mut processes = self
            .processes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (_, child) in processes.iter_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.folder);
    }
}

/// What a start may be told (tests of the start's own refusals).
#[derive(Debug, Default, Clone)]
pub struct Options {
    /// The folder of the programs; else the build of `kind/pins.env`.
    pub bin_dir: Option<PathBuf>,
    /// The API server's port; else a free one.
    pub port: Option<u16>,
}

/// The test binary's control plane, started on first use; a start that failed panics in
/// every test that asks, with the cause and its fix.
pub fn shared() -> &'static RealApiServer {
    static SHARED: OnceLock<Result<RealApiServer, String>> = OnceLock::new();
    match SHARED.get_or_init(|| start(Options::default()).map_err(|e| format!("{e:#}"))) {
        Ok(server) => server,
        Err(e) => panic!("the real API server did not start: {e}"),
    }
}

/// Starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler, and returns once
/// the API server answers `/readyz` and the controllers have made the `default`
/// ServiceAccount of `default`.
pub fn start(options: Options) -> anyhow::Result<RealApiServer> {
    // A thread of its own: the caller may be inside a test's runtime, where blocking waits
    // (and a runtime of our own for the readiness reads) are not allowed.
    std::thread::spawn(move || start_here(options))
        .join()
        .map_err(|_| anyhow::anyhow!("the real API server's start panicked"))?
}

fn start_here(options: Options) -> anyhow::Result<RealApiServer> {
    let bin = match options.bin_dir {
        Some(bin) => bin,
        None => {
            let checkout = kandev_harness::paths::build_checkout();
            Pins::read_from(&checkout.join(kandev_harness::host::kube_build::PINS))?.bin_dir()?
        }
    };
    for program in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ] {
        if !bin.join(program).is_file() {
            bail!(
                "{} is missing, so no real API server can start\n  fix: bash harness/scripts/ensure-kind.sh --programs-only (it builds etcd and Kubernetes' programs from kind/pins.env)",
                bin.join(program).display()
            );
        }
    }
    let api_port = match options.port {
        Some(port) => {
            if let Err(e) = TcpListener::bind(("127.0.0.1", port)) {
                bail!(
                    "port {port} on 127.0.0.1 is taken ({e}): the API server cannot listen there\n  fix: stop what holds it (ss -ltnp 'sport = :{port}'), or let the start choose a free port"
                );
            }
            port
        }
        None => free_port()?,
    };
    remove_stale_folders();
    let folder = std::env::temp_dir().join(format!(
        "kandev-real-apiserver-{}-{}",
        std::process::id(),
        kandev_harness::pod::identity::random_hex(4)
    ));
    std::fs::create_dir_all(&folder).with_context(|| format!("create {}", folder.display()))?;

    let (etcd_client, etcd_peer) = (free_port()?, free_port()?);
    let certificates = Certificates::write(&folder)?;
    let admin_token = kandev_harness::pod::identity::random_hex(16);
    std::fs::write(
        folder.join("tokens.csv"),
        format!("{admin_token},kandev-admin,kandev-admin-uid,\"system:masters\"\n"),
    )?;
    let server = format!("https://127.0.0.1:{api_port}");
    let kubeconfig = folder.join("kubeconfig");
    let config = crate::tls::kubeconfig(CONTEXT, &server, &certificates.ca_pem, &admin_token);
    std::fs::write(&kubeconfig, serde_json::to_vec_pretty(&config)?)?;

    let mut plane = RealApiServer {
        kubeconfig: kubeconfig.clone(),
        context: CONTEXT.into(),
        server: server.clone(),
        version: String::new(),
        admin_token,
        folder: folder.clone(),
        processes: Mutex::new(Vec::new()),
    };
    let f = |name: &str| folder.join(name).display().to_string();
    plane.spawn(
        &bin,
        "etcd",
        &[
            "--name=kandev".into(),
            format!("--data-dir={}", f("etcd")),
            format!("--listen-client-urls=http://127.0.0.1:{etcd_client}"),
            format!("--advertise-client-urls=http://127.0.0.1:{etcd_client}"),
            format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"),
            format!("--initial-cluster=kandev=http://127.0.0.1:{etcd_peer}"),
            // Test data: nothing survives the process, so nothing needs to reach the disk.
            "--unsafe-no-fsync=true".into(),
            "--log-level=warn".into(),
        ],
    )?;
    plane.wait_for("etcd", || http_ok(etcd_client, "/health"))?;
    plane.spawn(
        &bin,
        "kube-apiserver",
        &[
            format!("--etcd-servers=http://127.0.0.1:{etcd_client}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            // A loopback address cannot be the `kubernetes` Service's endpoint ("may not be in
            // the loopback range"): nothing here reaches the API server through it.
            "--endpoint-reconciler-type=none".into(),
            format!("--secure-port={api_port}"),
            format!("--tls-cert-file={}", f("apiserver.crt")),
            format!("--tls-private-key-file={}", f("apiserver.key")),
            format!("--client-ca-file={}", f("ca.crt")),
            format!("--token-auth-file={}", f("tokens.csv")),
            "--authorization-mode=Node,RBAC".into(),
            // As kubeadm (and so Kind) sets it: without it every privileged container is
            // refused ("disallowed by cluster policy").
            "--allow-privileged=true".into(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", f("sa.pub")),
            format!("--service-account-signing-key-file={}", f("sa.key")),
            // Only allocated from (Services get addresses); no traffic goes there.
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            "--profiling=false".into(),
            "--v=1".into(),
        ],
    )?;
    plane.wait_for("kube-apiserver", || {
        kubectl(&bin, &kubeconfig, &["get", "--raw", "/readyz"]).is_ok_and(|out| out == "ok")
    })?;
    let version = kubectl(&bin, &kubeconfig, &["get", "--raw", "/version"])?;
    plane.version = serde_json::from_str::<serde_json::Value>(&version)?["gitVersion"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let kc = format!("--kubeconfig={}", kubeconfig.display());
    plane.spawn(
        &bin,
        "kube-controller-manager",
        &[
            kc.clone(),
            "--leader-elect=false".into(),
            // No serving port: nothing reads its metrics here.
            "--secure-port=0".into(),
            "--controllers=serviceaccount-controller,namespace-controller,garbage-collector-controller,resourcequota-controller,job-controller,root-ca-certificate-publisher-controller,persistentvolumeclaim-protection-controller,persistentvolume-binder-controller,pod-garbage-collector-controller,ttl-after-finished-controller,clusterrole-aggregation-controller".into(),
            format!("--root-ca-file={}", f("ca.crt")),
            format!("--service-account-private-key-file={}", f("sa.key")),
            "--use-service-account-credentials=false".into(),
        ],
    )?;
    plane.spawn(
        &bin,
        "kube-scheduler",
        &[kc, "--leader-elect=false".into(), "--secure-port=0".into()],
    )?;
    plane.wait_for(
        "kube-controller-manager (the default ServiceAccount)",
        || {
            kubectl(
                &bin,
                &kubeconfig,
                &[
                    "get",
                    "--raw",
                    "/api/v1/namespaces/default/serviceaccounts/default",
                ],
            )
            .is_ok()
        },
    )?;
    Ok(plane)
}

impl RealApiServer {
    /// Starts `program` of `bin` with `args`, its output to `<folder>/<program>.log`.
    fn spawn(&mut self, bin: &Path, program: &str, args: &[String]) -> anyhow::Result<()> {
        let log = std::fs::File::create(self.folder.join(format!("{program}.log")))?;
        let mut command = Command::new("setpriv");
        command
            .arg("--pdeathsig")
            .arg("KILL")
            .arg("--")
            .arg(bin.join(program))
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = keeper_spawn(command).with_context(|| {
            format!(
                "start {} (setpriv, util-linux)",
                bin.join(program).display()
            )
        })?;
        self.processes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((program.to_owned(), child));
        Ok(())
    }

    /// Waits until `ready` holds; a process that exited, or a wait past [`READY_WITHIN`], is
    /// an error with the end of every log.
    fn wait_for(&self, what: &str, ready: impl Fn() -> bool) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            if ready() {
                return Ok(());
            }
            let mut processes = self
                .processes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for (name, child) in processes.iter_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    let log = self.log_tail(name);
                    let hint = if log.contains("address already in use") {
                        "a port it was given is taken: another process took it between the choice and the start; retry"
                    } else if log.contains("member") && log.contains("bootstrapped") {
                        "etcd found a stale data folder: remove it and retry"
                    } else {
                        "read its log above"
                    };
                    bail!(
                        "{name} exited ({status}) while waiting for {what}:\n{log}\n  fix: {hint}"
                    );
                }
            }
            drop(processes);
            if start.elapsed() > READY_WITHIN {
                let logs: Vec<String> = ["etcd", "kube-apiserver", "kube-controller-manager"]
                    .iter()
                    .map(|n| format!("{n}:\n{}", self.log_tail(n)))
                    .collect();
                bail!(
                    "{what} was not ready within {READY_WITHIN:?}:\n{}\n  fix: read the logs in {}",
                    logs.join("\n"),
                    self.folder.display()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn log_tail(&self, program: &str) -> String {
        let text =
            std::fs::read_to_string(self.folder.join(format!("{program}.log"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(12)..].join("\n")
    }

    /// The admin client, opened from the kubeconfig as the harness opens a cluster's.
    pub async fn admin_client(&self) -> kube::Client {
        kandev_harness::backend::kube::cluster::open(Some(&self.kubeconfig), Some(&self.context))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "open the real API server: {}",
                    kandev_harness::error_chain(&e)
                )
            })
            .admin
    }
}

/// Spawns through the one thread that outlives every test (see the module doc: the
/// processes' parent-death signal follows the thread that started them).
fn keeper_spawn(command: Command) -> std::io::Result<Child> {
    type Request = (Command, mpsc::Sender<std::io::Result<Child>>);
    static KEEPER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    let keeper = KEEPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("real-api-server-keeper".into())
            .spawn(move || {
                // The sender is in a static, never dropped: this loop ends with the process.
                while let Ok((mut command, answer)) = rx.recv() {
                    let _ = answer.send(command.spawn());
                }
            })
            .map(|_| ())
            .unwrap_or_else(|e| panic!("start the keeper thread: {e}"));
        Mutex::new(tx)
    });
    let (tx, rx) = mpsc::channel();
    keeper
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .send((command, tx))
        .map_err(|_| std::io::Error::other("the keeper thread is gone"))?;
    rx.recv()
        .map_err(|_| std::io::Error::other("the keeper thread is gone"))?
}

/// Removes `kandev-real-apiserver-<pid>-*` folders whose process is gone.
fn remove_stale_folders() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("kandev-real-apiserver-") else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or_default();
        if !pid.is_empty() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A plain HTTP GET on 127.0.0.1 answered 200 (etcd's health).
fn http_ok(port: u16, path: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200")
}

/// `kubectl` of the same build, its stdout when it exits 0.
fn kubectl(bin: &Path, kubeconfig: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(bin.join("kubectl"))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg("--request-timeout=5s")
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

struct Certificates {
    ca_pem: String,
}

impl Certificates {
    /// A CA, the API server's serving certificate for 127.0.0.1 and localhost, and the
    /// service-account signing key pair, written into `folder`.
    fn write(folder: &Path) -> anyhow::Result<Self> {
        let server = crate::tls::server_certificate(
            "kandev real-api-server CA",
            "kube-apiserver",
            &["kubernetes.default.svc"],
            &[],
        )?;
        let sa = rcgen::KeyPair::generate()?;
        for (name, text) in [
            ("ca.crt", server.ca_pem.clone()),
            ("apiserver.crt", server.cert.pem()),
            ("apiserver.key", server.key.serialize_pem()),
            ("sa.key", sa.serialize_pem()),
            ("sa.pub", sa.public_key_pem()),
        ] {
            std::fs::write(folder.join(name), text)?;
        }
        Ok(Self {
            ca_pem: server.ca_pem,
        })
    }
}
