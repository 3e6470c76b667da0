//! `lifecycle::task_sessions` — a task-owned Pod runs several sessions: the first launches
//! the Pod (claim, preparation, handshake), two more join it concurrently as Kandev's
//! executor adds a session to a task's Pod (its own `auth.env` in its own home under
//! `/run/kandev/sessions/<hash>/home`, its own agent process through agentctl; no new Pod,
//! claim or preparation). Judged from the Pod: the three homes and their `auth.env` files
//! (mode 0600, owner 1000, each its own `KANDEV_SESSION_ID` and `HOME`), one Pod UID and one
//! claim, each session's agent process (agentctl's instances and `/proc`: its own process
//! group, session id and HOME); a backend restart reconnects the task's session from its
//! inventory row to the same Pod, its three session processes untouched; stopping one session
//! ends only its process (the siblings'
//! processes are the same ones, their homes unchanged); the task's terminal cleanup removes
//! the Pod and the claim.
//!
//! Can fail when the sessions' homes are not their own, when the login profile of the agent
//! user overrides a session's environment, or when one session's end takes its siblings'
//! processes with it.

use anyhow::anyhow;
use kandev_harness::runner::{
    Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, broken_by, promise,
};
use kandev_harness::session::{
    RecordedToken, Session, SessionHandle, SessionOptions, terminal_cleanup,
};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const SESSION_HOMES: Check = Check {
    id: "session_homes",
    promise: "each of three concurrent sessions of one task has its own home /run/kandev/sessions/<hash>/home (a folder, not a link) with its own auth.env: mode 0600, owner 1000, its KANDEV_SESSION_ID and HOME",
    twin: Twin::Prepare("session-homes-on-workspace"),
};
const ONE_POD: Check = Check {
    id: "one_pod",
    promise: "the three sessions run in the task's one Pod (same UID) on its one workspace claim",
    twin: Twin::Mirror(
        "whether a joining session gets a Pod or claim of its own is decided by Kandev's executor alone (mirrored in Session::join, which writes the session's files into the task's Pod and creates no object); the Pod has no API credentials (automountServiceAccountToken false, checked by daemon::socket_only), so no template, image or prepare script can create or replace one. Kept in the scenario because the UIDs are read from the running Pod and claim",
    ),
};
const OWN_PROCESSES: Check = Check {
    id: "own_processes",
    promise: "each session's agent process runs through agentctl in its own process group with its own environment (its KANDEV_SESSION_ID and HOME, read from /proc)",
    twin: Twin::Worker("worker-profile-fixed-home"),
};
const BACKEND_RESTART: Check = Check {
    id: "backend_restart",
    promise: "after a backend restart the task's session reconnects from its inventory row alone to the same Pod UID with the recorded token, and the three sessions' agent processes are the same processes, still running",
    twin: Twin::Mirror(super::agent_restart::BACKEND_RESTART_DECIDED_BY),
};
const STOP_KEEPS_SIBLINGS: Check = Check {
    id: "stop_keeps_siblings",
    promise: "stopping one session ends only its agent process: its siblings' agent processes keep running (the same processes) and their homes are unchanged",
    twin: Twin::Prepare("session-end-kills-agents"),
};
const CLEANUP_REMOVES: Check = Check {
    id: "cleanup_removes",
    promise: "the task's terminal cleanup removes its one Pod and its workspace claim",
    twin: Twin::Mirror(
        "as lifecycle::teardown_exact/removes_owned: only the terminal cleanup's own deletes decide it (Kandev's, mirrored in terminal_cleanup in harness/src/session/recovery.rs, tested against the API double in harness/tests/kube_backend.rs), by the recorded UIDs; nothing of the Pod runs at its deletion or can hold it, and the sessions' files live inside the Pod. Kept in the scenario because it deletes the running Pod and claim and reads the API back",
    ),
};

pub fn scenario() -> Scenario {
    Scenario {
        name: "lifecycle::task_sessions",
        promise: "three concurrent sessions share one task Pod and claim, each with its own home, auth.env and agent process; a backend restart keeps the Pod and the sessions' processes; stopping one keeps its siblings; terminal cleanup removes Pod and claim",
        checks: &[
            SESSION_HOMES,
            ONE_POD,
            OWN_PROCESSES,
            BACKEND_RESTART,
            STOP_KEEPS_SIBLINGS,
            CLEANUP_REMOVES,
        ],
        timeout: Duration::from_secs(300),
        starts_first: false,
        run,
    }
}

/// One session as the Pod shows it.
struct Seen {
    session_id: String,
    home: String,
}

/// `stat` of each home and auth.env, and the auth.env's identity lines, as the agent user.
async fn homes(session: &Session, seen: &[Seen]) -> anyhow::Result<Vec<Value>> {
    let script = r#"for home in "$@"; do
  link=no; [ -L "$home" ] && link=yes
  kind=$(stat -c '%F %i' "$home" 2>/dev/null || echo missing)
  file=$(stat -c '%a %u %F' "$home/auth.env" 2>/dev/null || echo missing)
  sid=$(sed -n "s/^KANDEV_SESSION_ID='\(.*\)'$/\1/p" "$home/auth.env" 2>/dev/null)
  envhome=$(sed -n "s/^HOME='\(.*\)'$/\1/p" "$home/auth.env" 2>/dev/null)
  sum=$(sha256sum "$home/auth.env" 2>/dev/null | cut -d' ' -f1)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$home" "$link" "$kind" "$file" "$sid" "$envhome" "$sum"
done"#;
    let mut argv = vec!["sh", "-c", script, "sh"];
    argv.extend(seen.iter().map(|s| s.home.as_str()));
    let out = session.in_main(&argv, Duration::from_secs(20)).await?;
    if !out.success() {
        anyhow::bail!(
            "read the session homes: {}: {}",
            out.exit_text(),
            out.stderr_text().trim()
        );
    }
    Ok(out
        .stdout_text()
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            let at = |i: usize| f.get(i).copied().unwrap_or_default();
            json!({"home": at(0), "symlink": at(1) == "yes", "kind": at(2), "auth_env": at(3),
                "session_id": at(4), "env_home": at(5), "sha256": at(6)})
        })
        .collect())
}

/// What is wrong with the homes read by [`homes`], if anything.
fn homes_wrong(seen: &[Seen], found: &[Value]) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut inodes = BTreeSet::new();
    for (s, f) in seen.iter().zip(found) {
        let field = |k: &str| f.get(k).and_then(Value::as_str).unwrap_or_default();
        if f.get("symlink") != Some(&Value::Bool(false)) {
            wrong.push(format!("{} is a symlink", s.home));
        }
        match field("kind").rsplit_once(' ') {
            Some(("directory", inode)) => {
                if !inodes.insert(inode.to_owned()) {
                    wrong.push(format!(
                        "{} is the same folder as another session's",
                        s.home
                    ));
                }
            }
            _ => wrong.push(format!("{} is {}", s.home, field("kind"))),
        }
        if field("auth_env") != "600 1000 regular file" {
            wrong.push(format!(
                "{}/auth.env is {} (mode, owner, type)",
                s.home,
                field("auth_env")
            ));
        }
        if field("session_id") != s.session_id || field("env_home") != s.home {
            wrong.push(format!(
                "{}/auth.env has KANDEV_SESSION_ID {:?} and HOME {:?}, not {} and its home",
                s.home,
                field("session_id"),
                field("env_home"),
                s.session_id
            ));
        }
    }
    if found.len() != seen.len() {
        wrong.push(format!(
            "{} homes read for {} sessions",
            found.len(),
            seen.len()
        ));
    }
    wrong
}

/// Every agent CLI process (`/opt/kandev/agentctl session`) in the main container: its pid,
/// process group, start time and the session id and HOME of its environment.
async fn agent_processes(session: &Session) -> anyhow::Result<Vec<Value>> {
    let script = r#"for p in /proc/[0-9]*; do
  cmd=$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null) || continue
  [ "$cmd" = "/opt/kandev/agentctl session " ] || continue
  stat=$(cat "$p/stat" 2>/dev/null) || continue
  env=$(tr '\0' '\n' < "$p/environ" 2>/dev/null) || continue
  sid=$(printf '%s\n' "$env" | sed -n 's/^KANDEV_SESSION_ID=//p')
  home=$(printf '%s\n' "$env" | sed -n 's/^HOME=//p')
  printf '%s\t%s\t%s\t%s\t%s\n' "${p#/proc/}" "$(echo "$stat" | cut -d' ' -f5)" "$(echo "$stat" | cut -d' ' -f22)" "$sid" "$home"
done"#;
    let out = session
        .in_main(&["sh", "-c", script], Duration::from_secs(20))
        .await?;
    Ok(out
        .stdout_text()
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            let num = |i: usize| {
                f.get(i)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or_default()
            };
            json!({"pid": num(0), "pgid": num(1), "start": num(2),
                "session_id": f.get(3).copied().unwrap_or_default(),
                "home": f.get(4).copied().unwrap_or_default()})
        })
        .collect())
}

/// agentctl's instances as `id -> (pid, running)`.
fn instance_table(instances: &Value) -> BTreeMap<String, (u64, bool)> {
    instances
        .get("instances")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|i| {
                    Some((
                        i.get("id")?.as_str()?.to_owned(),
                        (i.get("pid")?.as_u64()?, i.get("running")?.as_bool()?),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The agent CLI process of the instance whose process group leader is `pid`.
fn process_of(processes: &[Value], pid: u64) -> Vec<&Value> {
    processes
        .iter()
        .filter(|p| p.get("pgid").and_then(Value::as_u64) == Some(pid))
        .collect()
}

/// Each session (with its instance id and its agent process as seen before) whose instance
/// agentctl no longer runs or whose agent process is not the same one (pid and start time).
fn not_kept<'a>(
    sessions: impl Iterator<Item = ((&'a Seen, &'a String), &'a Value)>,
    table: &BTreeMap<String, (u64, bool)>,
    processes: &[Value],
    when: &str,
) -> Vec<String> {
    sessions
        .filter_map(|((s, id), was)| {
            let running = table.get(id).is_some_and(|&(_, running)| running);
            let same = processes
                .iter()
                .any(|p| p.get("pid") == was.get("pid") && p.get("start") == was.get("start"));
            (!running || !same).then(|| {
                format!(
                    "{} (instance {id}) {when}: running {running}, its agent process {was} still there: {same}",
                    s.session_id
                )
            })
        })
        .collect()
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        ctx.step("launch the task's Pod with its first session; two more sessions join it");
        let mut first = ctx.launch(SessionOptions::default()).await?;
        let first_instance = first.start_agent_process().await?;
        let base = first.identity.session_id.clone();
        let (b, c) = (format!("{base}-b"), format!("{base}-c"));
        let (joined_b, joined_c) = tokio::join!(first.join(&b), first.join(&c));
        let mut joined: Vec<SessionHandle> = Vec::new();
        for result in [joined_b, joined_c] {
            joined.push(result.map_err(|e| {
                broken_by(
                    &SESSION_HOMES,
                    e.context("a session could not join the task's Pod"),
                )
            })?);
        }
        let seen: Vec<Seen> = std::iter::once(Seen {
            session_id: base.clone(),
            home: first.home(),
        })
        .chain(joined.iter().map(|j| Seen {
            session_id: j.identity.session_id.clone(),
            home: j.home(),
        }))
        .collect();
        let instance_ids: Vec<String> = std::iter::once(first_instance.clone())
            .chain(
                joined
                    .iter()
                    .map(|j| j.instance().unwrap_or_default().to_owned()),
            )
            .collect();

        ctx.step("each session has its own home and auth.env");
        let found = homes(&first, &seen).await?;
        let listing = first
            .in_main(
                &["sh", "-c", "ls -A /run/kandev/sessions"],
                Duration::from_secs(10),
            )
            .await?;
        let entries: Vec<String> = listing.stdout_text().lines().map(str::to_owned).collect();
        ctx.evidence(
            "homes",
            json!({"sessions": seen.iter().map(|s| json!({"session_id": s.session_id, "home": s.home})).collect::<Vec<_>>(),
                "found": found, "/run/kandev/sessions": entries}),
        );
        let wrong = homes_wrong(&seen, &found);
        promise(
            wrong.is_empty() && entries.len() == 3,
            &SESSION_HOMES,
            || {
                format!(
                    "{}; /run/kandev/sessions holds {entries:?}",
                    wrong.join("; ")
                )
            },
        )?;

        ctx.step("one Pod and one claim");
        let backend = ctx.backend();
        let pod = first.pod.clone();
        let uid = backend.pod_uid(&pod.namespace, &pod.name).await?;
        let workspace = match &first.workspace {
            Some(ws) => backend.get_workspace(&ws.name).await?.map(|w| w.uid),
            None => None,
        };
        let objects = backend
            .list_labelled(&[("kandev.ai/task-id", first.identity.task_id.as_str())])
            .await?;
        ctx.evidence(
            "task_objects",
            json!({"pod_uid": uid, "workspace_uid": workspace, "objects": objects}),
        );
        let foreign: Vec<&String> = objects
            .iter()
            .filter(|o| !o.contains(&pod.name) && !o.contains(&pod.uid))
            .collect();
        promise(
            uid.as_deref() == Some(pod.uid.as_str())
                && workspace == first.workspace.as_ref().map(|w| w.uid.clone())
                && foreign.is_empty(),
            &ONE_POD,
            || {
                format!(
                    "the task's Pod {} has UID {} (launched {}), its claim UID {}; objects of the task not of that Pod: {foreign:?}",
                    pod.name,
                    uid.as_deref().unwrap_or("gone"),
                    pod.uid,
                    workspace.as_deref().unwrap_or("none")
                )
            },
        )?;

        ctx.step("each session's agent process is its own, with its own environment");
        let instances = joined
            .first()
            .ok_or_else(|| anyhow!("no joined session"))?
            .agent()
            .instances()
            .await?;
        let table = instance_table(&instances);
        let processes = agent_processes(&first).await?;
        ctx.evidence(
            "processes",
            json!({"instances": instances, "agent_processes": processes, "session_instances": instance_ids}),
        );
        let mut wrong = Vec::new();
        let mut before = Vec::new();
        for (s, id) in seen.iter().zip(&instance_ids) {
            let Some(&(pid, running)) = table.get(id) else {
                wrong.push(format!(
                    "agentctl does not list {}'s instance {id}",
                    s.session_id
                ));
                continue;
            };
            let mine = process_of(&processes, pid);
            let field = |p: &Value, k: &str| {
                p.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            match mine.as_slice() {
                [p] if running
                    && field(p, "session_id") == s.session_id
                    && field(p, "home") == s.home =>
                {
                    before.push((*p).clone())
                }
                _ => wrong.push(format!(
                    "{}'s instance {id} (pid {pid}, running {running}) has agent processes {mine:?}, expected one with KANDEV_SESSION_ID {} and HOME {}",
                    s.session_id, s.session_id, s.home
                )),
            }
        }
        promise(wrong.is_empty(), &OWN_PROCESSES, || wrong.join("; "))?;

        ctx.step("restart the backend: the task's session reconnects from its inventory row");
        let (mut first, reattached) = ctx
            .restart_backend(first)
            .await
            .map_err(|e| broken_by(&BACKEND_RESTART, e))?;
        let uid = backend.pod_uid(&pod.namespace, &pod.name).await?;
        let instances = first.agent()?.instances().await?;
        let table = instance_table(&instances);
        let processes = agent_processes(&first).await?;
        ctx.evidence(
            "after_backend_restart",
            json!({"pod_uid": uid, "recorded_token": reattached.token,
                "instance_lost": reattached.instance_lost, "instances": instances, "agent_processes": processes}),
        );
        let wrong = not_kept(
            seen.iter().zip(&instance_ids).zip(&before),
            &table,
            &processes,
            "after the backend restart",
        );
        promise(
            uid.as_deref() == Some(pod.uid.as_str())
                && reattached.token == RecordedToken::Accepted
                && reattached.instance_lost.is_none()
                && first.instance() == Some(first_instance.as_str())
                && wrong.is_empty(),
            &BACKEND_RESTART,
            || {
                format!(
                    "after the backend restart: Pod UID {} (launched {}), recorded token {:?}, task session's process lost: {}; {}",
                    crate::support::or_unknown(uid.as_deref()),
                    pod.uid,
                    reattached.token,
                    reattached.instance_lost.as_deref().unwrap_or("no"),
                    wrong.join("; ")
                )
            },
        )?;

        ctx.step("stop the first session: its siblings keep their processes and homes");
        let (_, ended) = first.stop().await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after_instances = joined
            .first()
            .ok_or_else(|| anyhow!("no joined session"))?
            .agent()
            .instances()
            .await?;
        let table = instance_table(&after_instances);
        let processes = agent_processes(&first).await?;
        let siblings: Vec<Seen> = seen
            .iter()
            .skip(1)
            .map(|s| Seen {
                session_id: s.session_id.clone(),
                home: s.home.clone(),
            })
            .collect();
        let sibling_homes = homes(&first, &siblings).await?;
        ctx.evidence(
            "after_stop",
            json!({"ended": ended, "instances": after_instances, "agent_processes": processes, "sibling_homes": sibling_homes}),
        );
        let mut wrong = Vec::new();
        if table
            .get(&first_instance)
            .is_some_and(|&(_, running)| running)
        {
            wrong.push(format!(
                "the stopped session's instance {first_instance} still runs"
            ));
        }
        wrong.extend(not_kept(
            seen.iter().zip(&instance_ids).zip(&before).skip(1),
            &table,
            &processes,
            "after the stop",
        ));
        for (now, then) in sibling_homes.iter().zip(found.iter().skip(1)) {
            if now.get("sha256") != then.get("sha256") || now.get("kind") != then.get("kind") {
                wrong.push(format!("sibling home changed: was {then}, now {now}"));
            }
        }
        promise(
            ended.is_some() && wrong.is_empty(),
            &STOP_KEEPS_SIBLINGS,
            || {
                format!(
                    "stop answered {}; {}",
                    ended
                        .as_ref()
                        .map_or_else(|| "nothing".to_owned(), ToString::to_string),
                    wrong.join("; ")
                )
            },
        )?;

        ctx.step("stop the siblings, then the task's terminal cleanup");
        for handle in &mut joined {
            handle.stop().await?;
        }
        terminal_cleanup(backend.as_ref(), &first.recorded()).await?;
        let uid = backend.pod_uid(&pod.namespace, &pod.name).await?;
        let workspace_left = match &first.workspace {
            Some(ws) => backend.get_workspace(&ws.name).await?.map(|w| w.uid),
            None => None,
        };
        ctx.evidence(
            "after_cleanup",
            json!({"pod_uid": uid, "workspace_uid": workspace_left}),
        );
        promise(
            uid.is_none() && workspace_left.is_none(),
            &CLEANUP_REMOVES,
            || {
                format!(
                    "after terminal cleanup: Pod UID {}, claim UID {}",
                    uid.as_deref().unwrap_or("gone"),
                    workspace_left.as_deref().unwrap_or("gone")
                )
            },
        )?;
        Ok(Verdict::Passed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(id: &str, home: &str) -> Seen {
        Seen {
            session_id: id.into(),
            home: home.into(),
        }
    }

    fn found(home: &str, kind: &str, id: &str) -> Value {
        json!({"home": home, "symlink": false, "kind": kind, "auth_env": "600 1000 regular file",
            "session_id": id, "env_home": home, "sha256": "x"})
    }

    #[test]
    fn homes_are_judged_own_folders_with_their_own_auth_env() {
        let sessions = [seen("a", "/h/a"), seen("b", "/h/b")];
        let good = [
            found("/h/a", "directory 5", "a"),
            found("/h/b", "directory 6", "b"),
        ];
        assert!(homes_wrong(&sessions, &good).is_empty());
        // One folder behind two paths, another session's id, a loose mode, a missing home.
        let shared = [
            found("/h/a", "directory 5", "a"),
            found("/h/b", "directory 5", "b"),
        ];
        assert!(homes_wrong(&sessions, &shared)[0].contains("same folder"));
        let swapped = [
            found("/h/a", "directory 5", "a"),
            found("/h/b", "directory 6", "a"),
        ];
        assert!(homes_wrong(&sessions, &swapped)[0].contains("KANDEV_SESSION_ID"));
        let mut loose = good.clone();
        loose[1]["auth_env"] = json!("644 1000 regular file");
        assert!(homes_wrong(&sessions, &loose)[0].contains("644"));
        let missing = [
            found("/h/a", "directory 5", "a"),
            found("/h/b", "missing", ""),
        ];
        assert!(!homes_wrong(&sessions, &missing).is_empty());
        assert!(!homes_wrong(&sessions, &good[..1]).is_empty());
    }
}
