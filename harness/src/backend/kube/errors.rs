//! The `kind` and `kube` backends' errors: [`ClusterError`] for what stops a cluster's set-up
//! (each names its cause and fix; Kind's commands and the cluster's set-up both use it), and
//! how kube-rs errors of Pod operations become [`BackendError`]s.

use crate::backend::BackendError;
use crate::wait::WaitTimedOut;
use std::time::Duration;

/// The check a preflight refusal of the executor's permissions is (`launch::connection`'s
/// `granted`; the scenario's unit test keeps the two names equal).
pub const GRANTED_CHECK: &str = "launch::connection/granted";

/// The Kind release the harness pins: the one whose release notes list the node image
/// `kind/cluster.yaml` pins (a node image is supported only by the Kind release that built
/// it), and the one the nightly workflow installs. The one place it is written in code
/// (`kind::KIND_VERSION`); a test in `kind` holds the config's comment and the workflow to
/// it.
pub const KIND_VERSION: &str = "v0.33.0";

/// Why the cluster cannot be used; each names the cause and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "the kind binary `{bin}` cannot be run (`kind` is not on PATH?)\n  fix: bash harness/scripts/ensure-kind.sh (builds kind {} and a node image on this machine, no registry needed), or install kind {0} (https://kind.sigs.k8s.io/dl/{0}/kind-linux-amd64: the release that built the node image kind/cluster.yaml pins), or pass --kind-bin PATH",
        KIND_VERSION
    )]
    KindMissing { bin: String },
    #[error(
        "kind {step} failed: {output}\n  fix: check that this host's Docker engine can run Kind nodes (`kind create cluster` by hand shows the same)"
    )]
    Kind { step: String, output: String },
    #[error(
        "kind create cluster {name} failed: {output}\n  the cluster's logs (kind export logs): {logs}; the cluster was {deleted}\n  fix: read the node's kubelet.log and journal.log there; check that this host's Docker engine can run Kind nodes"
    )]
    KindNotUp {
        name: String,
        output: String,
        /// Where `kind export logs` wrote the node's logs, or why it could not.
        logs: String,
        /// "deleted", or why not.
        deleted: String,
    },
    #[error(
        "the Kind cluster from {config} would not start: {cause}\n  fix: add `failCgroupV1: false` to the config's KubeletConfiguration patch (kind/cluster.yaml has it), pass --kind-node-image with a node before v1.35, or run on a cgroup v2 host (what Kandev's recipe expects); nothing was created"
    )]
    KindCgroupV1 { config: String, cause: String },
    #[error(
        "docker {step} failed: {output}\n  fix: loading images into Kind needs the docker CLI of this host's engine on PATH"
    )]
    Docker { step: String, output: String },
    #[error(
        "read the kubeconfig {path}: {cause}\n  fix: pass --kubeconfig FILE (or set KUBECONFIG)"
    )]
    Kubeconfig {
        path: String,
        /// In the message (the fix follows it), so not a `source`: printed once.
        cause: String,
    },
    #[error(
        "--backend kube needs an explicit --context (the ambient current context is never used); contexts in the kubeconfig: {available:?}"
    )]
    NoContext { available: Vec<String> },
    #[error(
        "the kubeconfig has no context {context:?}; it has {available:?}\n  fix: pass one of those to --context"
    )]
    ContextMissing {
        context: String,
        available: Vec<String>,
    },
    #[error(
        "the API server of context {context} ({server}) does not answer: {reason}\n  fix: check that the cluster is up and reachable from here (VPN, firewall, `kubectl --context {context} version`); nothing was created"
    )]
    Unreachable {
        context: String,
        server: String,
        reason: String,
    },
    #[error(
        "the proxy in {source_name} cannot be used: {problem}\n  fix: set it to http://HOST:PORT, https://HOST:PORT or socks5://HOST:PORT, or add the API server's host to NO_PROXY (a kubeconfig proxy-url is used whatever NO_PROXY says, as kubectl uses it)"
    )]
    Proxy {
        /// `the kubeconfig's proxy-url` or `$HTTPS_PROXY`, ...
        source_name: String,
        problem: String,
    },
    #[error(
        "NO_PROXY (or no_proxy) has an entry the Kubernetes client cannot read: {problem}\n  fix: correct or remove that entry; entries are comma-separated hosts or domains (with an optional :PORT; .example.com for subdomains), IP addresses, CIDRs, or * alone"
    )]
    NoProxy { problem: String },
    #[error(
        "--in-cluster, but this is not a Pod with a service account: {cause}\n  fix: run inside a Pod whose service account token is mounted (automountServiceAccountToken: true; `kandev-acceptance launch` makes such a Job), or drop --in-cluster and pass --context"
    )]
    NotInCluster { cause: String },
    #[error(
        "read the bookkeeper's token {path}: {cause}\n  fix: mount the Secret holding a token of the harness's bookkeeping identity there (`kandev-acceptance launch` does), or omit --bookkeeper-token so the Pod's own identity also keeps the books"
    )]
    BookkeeperToken { path: String, cause: String },
    #[error(
        "namespace {namespace} does not exist\n  fix: create it (Kandev never creates namespaces), or omit --namespace so the run creates and removes its own"
    )]
    NamespaceMissing { namespace: String },
    #[error(
        "{problem}; this cluster's StorageClasses: {classes:?}; nothing was created\n  fix: pass --storage-class NAME (one of those), or --workspace-mode empty-dir (a workspace that lives with its Pod)"
    )]
    StorageClass {
        problem: String,
        classes: Vec<String>,
    },
    #[error(
        "your identity may not create the run's namespace {namespace}: {message}\n  fix: pass --namespace N, an existing namespace where your identity may create Pods, ServiceAccounts, Roles, RoleBindings and Leases (docs/operators.md lists every grant), or grant it create on namespaces"
    )]
    NamespaceCreateForbidden { namespace: String, message: String },
    #[error(
        "{identity} lacks what a run from outside does with your identity in namespace {namespace}: {missing:?}; nothing was created\n  fix: grant these (docs/operators.md, \"Your identity\", says why each; `kubectl auth can-i VERB RESOURCE -n {namespace}` asks one), or run as an identity that holds them; an identity bound to one namespace passes --namespace N"
    )]
    OperatorForbidden {
        identity: String,
        namespace: String,
        missing: Vec<String>,
    },
    /// Refused before any scenario, this is `launch::connection/granted` failing (its
    /// broken twin, a Role without `pods/portforward`, ends here): the message names it.
    #[error(
        "{GRANTED_CHECK}: the executor identity {executor} lacks permissions Kandev needs in namespace {namespace}: {missing:?}\n  fix: grant them in the executor's Role (the run's own mirrors Kandev's; --executor-role FILE replaces its rules; --in-cluster, the Role bound to the Pod's service account); if it grants them, an admission policy or RBAC webhook is denying them"
    )]
    Forbidden {
        executor: String,
        namespace: String,
        missing: Vec<String>,
    },
    #[error(
        "the executor Role {path} {problem}\n  fix: pass a file holding one rbac.authorization.k8s.io/v1 Role (`kind: Role`) whose rules are the executor's permissions; the harness sets its name, namespace and labels; nothing was created"
    )]
    ExecutorRole { path: String, problem: String },
    #[error(
        "the API server rejects the task Pod (its privileged docker-engine companion) in namespace {namespace} (server-side dry run): {message}\n  fix: {fix}"
    )]
    PrivilegedRejected {
        namespace: String,
        message: String,
        /// What this refusal's admission system needs (`admission_fix`).
        fix: String,
    },
    #[error(
        "the service account {account} of the task Pods does not exist in namespace {namespace} (waited {waited:?}; the service-account controller creates `default` in every namespace)\n  fix: check that the controller manager runs, or create the account the template names"
    )]
    ServiceAccountMissing {
        namespace: String,
        account: String,
        waited: Duration,
    },
    /// A bounded wait of the set-up ran out (mapped to the error it means where it ends).
    #[error(transparent)]
    TimedOut(#[from] WaitTimedOut),
    #[error("{what}")]
    Setup {
        what: String,
        #[source]
        source: anyhow::Error,
    },
}

/// A set-up step's kube-rs error, named by what the step did.
pub(super) fn setup(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ClusterError {
    let what = what.into();
    move |e| ClusterError::Setup {
        what,
        source: e.into(),
    }
}

/// The fix for a dry run of the task Pod the API server refused, by the admission system
/// that refused it, read from the status's code and message as each words it (kubernetes
/// v1.37.2: Pod Security `staging/src/k8s.io/pod-security-admission/admission/admission.go`
/// "violates PodSecurity"; ResourceQuota `plugin/pkg/admission/resourcequota` "exceeded
/// quota" and "must specify"; LimitRange `plugin/pkg/admission/limitranger` "maximum ... per
/// Container"; webhooks `staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/errors`
/// "admission webhook ... denied the request" and "failed calling webhook"; OpenShift's SCC
/// admission "unable to validate against any security context constraint"; 422 Invalid).
pub fn admission_fix(code: u16, message: &str, namespace: &str, executor: &str) -> String {
    let account = executor.rsplit(':').next().unwrap_or(executor);
    // Webhooks first: a policy engine's denial may quote Pod Security's or a quota's words
    // (Kyverno's podSecurity rule: "... denied the request: ... violates PodSecurity ..."), and
    // its fix is the policy's, not the namespace label's.
    if message.contains("failed calling webhook") {
        "an admission webhook did not answer (its service is down or slow; failurePolicy Fail refuses then): check the webhook the message names, and its Service and Pods, then rerun".into()
    } else if message.contains("admission webhook") && message.contains("denied the request") {
        "your policy engine (the webhook the message names: Kyverno, Gatekeeper, ...) denies privileged Pods: exempt this namespace or the task Pods from that policy".into()
    } else if message.contains("violates PodSecurity") {
        format!(
            "Pod Security admission refuses privileged Pods there: label the namespace pod-security.kubernetes.io/enforce=privileged (kubectl label namespace {namespace} pod-security.kubernetes.io/enforce=privileged), or use a namespace that has it"
        )
    } else if message.contains("security context constraint") {
        format!(
            "OpenShift's SecurityContextConstraints admit no privileged container for the Pods' service account: oc adm policy add-scc-to-user privileged -z {account} -n {namespace} (and for the account the template names, if another)"
        )
    } else if message.contains("exceeded quota") || message.contains("must specify") {
        "the namespace's ResourceQuota refuses the Pod: give the template's containers the requests and limits the quota constrains, raise the quota, or use a namespace without one (kubectl describe resourcequota -n NAMESPACE shows it)".into()
    } else if message.contains("per Container is") || message.contains("per Pod is") {
        "the namespace's LimitRange refuses the template's resources: lower them to its maximum, or use another namespace (kubectl describe limitrange -n NAMESPACE shows it)".into()
    } else if code == 422 {
        "the API server finds the composed Pod invalid (the message names the field): check the template against this cluster's Kubernetes version".into()
    } else {
        "allow privileged Pods there, e.g. label the namespace pod-security.kubernetes.io/enforce=privileged, or exempt it from your policy engine".into()
    }
}

/// Creating the run's namespace failed: a 403 names `--namespace` (an identity bound to
/// namespaces it is given), any other error is the step's.
pub(super) fn namespace_create(namespace: String) -> impl FnOnce(kube::Error) -> ClusterError {
    move |e| match e {
        kube::Error::Api(status) if status.code == 403 => ClusterError::NamespaceCreateForbidden {
            namespace,
            message: status.message,
        },
        e => setup(format!("create namespace {namespace}"))(e),
    }
}

/// A Pod operation's failure, named by the operation.
pub(super) fn other(operation: impl Into<String>, e: impl Into<anyhow::Error>) -> BackendError {
    BackendError::Other {
        operation: operation.into(),
        source: e.into(),
    }
}

/// Whether the API server refused with HTTP status `code`.
pub(super) fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == code)
}

#[cfg(test)]
mod tests {
    use super::{ClusterError, namespace_create};

    fn refused(code: u16, reason: &str, message: &str) -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": code, "reason": reason, "message": message
        }))
        .unwrap();
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn each_admission_refusal_names_its_own_fix() {
        let fix = |code, message: &str| {
            super::admission_fix(
                code,
                message,
                "ns1",
                "system:serviceaccount:ns1:kandev-acceptance-executor",
            )
        };
        let recorded: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(
                crate::paths::workspace_root().join("fixtures/kube/status-403-pod-security.json"),
            )
            .unwrap(),
        )
        .unwrap();
        let pss = fix(403, recorded["message"].as_str().unwrap());
        assert!(
            pss.contains(
                "kubectl label namespace ns1 pod-security.kubernetes.io/enforce=privileged"
            ),
            "{pss}"
        );
        for (code, message, expected) in [
            (
                403,
                "pods \"p\" is forbidden: unable to validate against any security context constraint: [provider \"restricted-v2\": .containers[1].privileged: Invalid value: true: Privileged containers are not allowed]",
                "oc adm policy add-scc-to-user privileged -z kandev-acceptance-executor -n ns1",
            ),
            (
                403,
                "pods \"p\" is forbidden: exceeded quota: compute, requested: limits.cpu=4, used: limits.cpu=0, limited: limits.cpu=2",
                "ResourceQuota",
            ),
            (
                403,
                "pods \"p\" is forbidden: failed quota: compute: must specify limits.cpu for: docker-engine",
                "ResourceQuota",
            ),
            (
                403,
                "pods \"p\" is forbidden: maximum cpu usage per Container is 1, but limit is 2",
                "LimitRange",
            ),
            (
                500,
                "Internal error occurred: failed calling webhook \"validate.kyverno.svc\": failed to call webhook: Post \"https://kyverno-svc.kyverno.svc:443/validate\": context deadline exceeded",
                "did not answer",
            ),
            (
                400,
                "admission webhook \"validation.gatekeeper.sh\" denied the request: [psp-privileged-container] Privileged container is not allowed: docker-engine",
                "policy engine",
            ),
            (
                400,
                "admission webhook \"validate.kyverno.svc-fail\" denied the request: policy Pod/ns1/p for resource violation: [podsecurity-subrule-restricted] restricted: Validation rule 'restricted' failed. It violates PodSecurity \"restricted:latest\": (privileged)",
                "policy engine",
            ),
            (
                422,
                "Pod \"p\" is invalid: spec.containers[0].image: Required value",
                "invalid",
            ),
        ] {
            let text = fix(code, message);
            assert!(text.contains(expected), "{message}: {text}");
        }
    }

    #[test]
    fn a_forbidden_namespace_create_names_namespace_as_the_fix() {
        // The API server's words for an identity bound to one namespace
        // (k8s.io/apiserver pkg/endpoints/handlers/responsewriters/errors.go, forbiddenMessage).
        let message = "namespaces is forbidden: User \"ci\" cannot create resource \"namespaces\" in API group \"\" at the cluster scope";
        let e = namespace_create("kandev-acceptance-r1".into())(refused(403, "Forbidden", message));
        assert!(
            matches!(e, ClusterError::NamespaceCreateForbidden { .. }),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains(message) && text.contains("fix: pass --namespace N"),
            "{text}"
        );
        // Any other refusal stays the step's own error.
        let e = namespace_create("kandev-acceptance-r1".into())(refused(
            409,
            "AlreadyExists",
            "exists",
        ));
        assert!(matches!(e, ClusterError::Setup { .. }), "{e:?}");
    }
}
