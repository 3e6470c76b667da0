//! A corpus of bad input (issue 39, item 1): the same requests sent to the real API server and
//! to the cluster double, each in namespaces of its own (the same names on both, a random
//! suffix in each), and their answers compared: the HTTP status code and, for a failure, the
//! `Status` reason; for a success, the fields the request changed (or a list's names, or a
//! watch's events). Names and labels at every limit, immutable fields on update,
//! resourceVersion conflicts and preconditions, dry runs, JSON merge patches (the double
//! refuses the other patch formats, 415: [`KNOWN`]), and field and label selectors. One
//! watch, which the double refuses (405: [`KNOWN`]): the harness never watches.
//!
//! A difference fails the test unless [`KNOWN`] lists it: the request, what each side
//! answers, and the upstream reason the double does not do it; an entry whose case no longer
//! differs fails it too. Each section is a test of its own (and a double of its own, without a
//! runtime: its Pods stay Pending, as the real API server's do with no node); the real API
//! server is the binary's. `--nocapture` shows every case's answers (`!!` an unlisted
//! difference, `~~` a listed one).

use crate::namespace;
use http::Method;
use http_body_util::BodyExt;
use kandev_harness::pod::identity::random_hex;
use kandev_test_support::real_api_server;
use serde_json::{Value, json};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A difference the double keeps on purpose: the case (as [`Side::note`] names it), what the
/// real API server answers and what the double answers (each as [`Answer::class`] shows it,
/// with the compared fields), and the upstream reason the double does not do it.
struct Known {
    case: &'static str,
    real: &'static str,
    double: &'static str,
    why: &'static str,
}

/// Why the double refuses every patch format but JSON merge patch.
const ONLY_MERGE_PATCHES: &str = "the harness's client patches with JSON merge patches only \
    (its Leases); the double answers every other patch type 415 UnsupportedMediaType, as the \
    API server answers a patch type it does not take, and the real API server is the referee \
    of the others";

/// Why the double admits what the real API server refuses before its registry stores anything
/// (the request's options, a body of another kind or namespace or with metadata values that
/// are not strings, the fields an update may not change, an Event's namespace): the harness
/// sends none of these, and the double no longer validates them; the real API server is the
/// referee (apiserver `pkg/endpoints/handlers`, apimachinery `ValidateDryRun`,
/// `EnsureObjectNamespaceMatchesRequestNamespace`, kubernetes `ValidatePodUpdate`,
/// `ValidateRoleBindingUpdate`, `ValidateObjectMetaUpdate`, `legacyValidateEvent`).
const NOT_VALIDATED: &str = "the double no longer validates this; the real API server is the \
    referee (the harness sends no such request)";

/// Why the double parses a label selector without judging its keys and values.
const SELECTOR_NOT_VALIDATED: &str = "the double parses a label selector without \
    NewRequirement's IsQualifiedName and IsValidLabelValue checks (apimachinery \
    pkg/labels/selector.go): the harness selects on its own labels, which the real API server \
    admits on its objects (names.rs); the real API server is the referee";

/// A case that differs only because an earlier one of the section was stored by the double
/// and refused by the real API server ([`NOT_VALIDATED`]).
const STORED_WHAT_REAL_REFUSED: &str = "follows from an earlier case the double admitted and \
    the real API server refused (NOT_VALIDATED): the double holds one object more";

/// Why the double stores a Pod's spec as sent.
const POD_NOT_DEFAULTED: &str = "the double stores a Pod's spec as sent, without the API \
    server's defaulting (kubernetes pkg/apis/core/v1/defaults.go) and its DefaultTolerationSeconds \
    admission plugin: the harness reads none of these fields back, and its admission comparison \
    runs on the real defaulting (admission.rs)";

/// Why the double stores a Role whose rules the real API server refuses.
const ROLE_NOT_VALIDATED: &str = "the double stores a Role's rules as sent, without \
    ValidatePolicyRule (kubernetes pkg/apis/rbac/validation/validation.go): the harness's own \
    Roles are admitted by the real API server (launch.rs), and executor_role_file refuses an \
    operator's Role with such a rule before anything is created";

/// Why the double refuses a Job other than `launch`'s, or its DELETE in another policy.
const JOB_BEYOND_LAUNCH: &str = "the double's Job controller runs launch's Job only (one Pod, \
    never retried: backoffLimit 0) and deletes a Job in the background only, as launch and gc \
    ask; it refuses the rest naming the field, where the real API server defaults and runs it \
    (real_api_server/jobs.rs judges the real Job controller)";

/// Why the double grants a TokenRequest the real API server refuses.
const TOKEN_NOT_VALIDATED: &str = "the double does not validate a TokenRequest's \
    expirationSeconds (ValidateTokenRequest, kubernetes pkg/apis/authentication/validation): \
    the harness asks 10 minutes or more, and real_api_server/jobs.rs judges the bounds";

const KNOWN: &[Known] = &[
    Known {
        case: "create a Job whose backoffLimit is left to its default",
        real: "201",
        double: "422 Invalid",
        why: JOB_BEYOND_LAUNCH,
    },
    Known {
        case: "dry-run delete of a Job, no propagation policy",
        real: "200",
        double: "400 BadRequest",
        why: JOB_BEYOND_LAUNCH,
    },
    Known {
        case: "a TokenRequest for 60 seconds",
        real: "422 Invalid",
        double: "201",
        why: TOKEN_NOT_VALIDATED,
    },
    Known {
        case: "create with dryRun=Bogus",
        real: "422 Invalid",
        double: "201",
        why: NOT_VALIDATED,
    },
    Known {
        case: "get after a create with dryRun=Bogus",
        real: "404 NotFound",
        double: "200",
        why: STORED_WHAT_REAL_REFUSED,
    },
    Known {
        case: "delete with dryRun=Bogus",
        real: "422 Invalid",
        double: "200",
        why: NOT_VALIDATED,
    },
    Known {
        case: "create an Event about an object of another namespace",
        real: "422 Invalid",
        double: "201",
        why: NOT_VALIDATED,
    },
    Known {
        case: "list Events with fieldSelector involvedObject.kind=ServiceAccount",
        real: "200; names [corpus-event-0, corpus-event-1]",
        double: "200; names [corpus-event-0, corpus-event-1, corpus-event-elsewhere]",
        why: STORED_WHAT_REAL_REFUSED,
    },
    Known {
        case: "list Events with fieldSelector involvedObject.fieldPath=",
        real: "200; names [corpus-event-0, corpus-event-1]",
        double: "200; names [corpus-event-0, corpus-event-1, corpus-event-elsewhere]",
        why: STORED_WHAT_REAL_REFUSED,
    },
    Known {
        case: "list Events with fieldSelector involvedObject.resourceVersion=",
        real: "200; names [corpus-event-0, corpus-event-1]",
        double: "200; names [corpus-event-0, corpus-event-1, corpus-event-elsewhere]",
        why: STORED_WHAT_REAL_REFUSED,
    },
    Known {
        case: "list Events with fieldSelector reportingComponent=",
        real: "200; names [corpus-event-0, corpus-event-1]",
        double: "200; names [corpus-event-0, corpus-event-1, corpus-event-elsewhere]",
        why: STORED_WHAT_REAL_REFUSED,
    },
    Known {
        case: "list Pods with fieldSelector spec.restartPolicy=Always",
        real: "200; names [sel-a, sel-b, sel-c]",
        double: "400 BadRequest",
        why: "a Pod's restartPolicy is Always by the API server's defaulting \
              (SetDefaults_PodSpec), which the double does not do (POD_NOT_DEFAULTED): it \
              answers this field label 400 \"not supported\" rather than select on a spec \
              not defaulted; the harness selects Pods by labels only",
    },
    Known {
        case: "update a Pod's tolerations (one added)",
        real: r#"200; /spec/tolerations=[{"effect":"NoExecute","key":"node.kubernetes.io/not-ready","operator":"Exists","tolerationSeconds":300},{"effect":"NoExecute","key":"node.kubernetes.io/unreachable","operator":"Exists","tolerationSeconds":300},{"effect":"NoSchedule","key":"corpus","operator":"Exists"}]; /metadata/generation=2"#,
        double: r#"200; /spec/tolerations=[{"effect":"NoSchedule","key":"corpus","operator":"Exists"}]; /metadata/generation=2"#,
        why: POD_NOT_DEFAULTED,
    },
    Known {
        case: "update a Pod's container name",
        real: "422 Invalid",
        double: "200",
        why: NOT_VALIDATED,
    },
    Known {
        case: "update a Pod's nodeName",
        real: "422 Invalid",
        double: "200",
        why: NOT_VALIDATED,
    },
    Known {
        case: "update a Pod's volumes (one added)",
        real: "422 Invalid",
        double: "200",
        why: NOT_VALIDATED,
    },
    Known {
        case: "update a Pod's restartPolicy",
        real: "422 Invalid",
        double: "200",
        why: NOT_VALIDATED,
    },
    Known {
        case: "update a Pod's container resources",
        real: "422 Invalid",
        double: "200",
        why: NOT_VALIDATED,
    },
    Known {
        case: "update a Pod's metadata.uid",
        real: "409 Conflict",
        double: "200",
        why: NOT_VALIDATED,
    },
    Known {
        case: "update a ServiceAccount's metadata.uid",
        real: "409 Conflict",
        double: "200",
        why: NOT_VALIDATED,
    },
    Known {
        case: "update a ServiceAccount whose body names another namespace",
        real: "400 BadRequest",
        double: "200",
        why: NOT_VALIDATED,
    },
    Known {
        case: "update a ServiceAccount whose body is of another kind",
        real: "400 BadRequest",
        double: "200",
        why: NOT_VALIDATED,
    },
    Known {
        case: "create a ServiceAccount whose body names another namespace",
        real: "400 BadRequest",
        double: "201",
        why: NOT_VALIDATED,
    },
    Known {
        case: "create a ServiceAccount whose body is of another kind",
        real: "400 BadRequest",
        double: "201",
        why: NOT_VALIDATED,
    },
    Known {
        case: "create a Role with a rule without verbs",
        real: "422 Invalid",
        double: "201",
        why: ROLE_NOT_VALIDATED,
    },
    Known {
        case: "create a Role with a rule with nonResourceURLs",
        real: "422 Invalid",
        double: "201",
        why: ROLE_NOT_VALIDATED,
    },
    Known {
        case: "create a Role with a rule without apiGroups",
        real: "422 Invalid",
        double: "201",
        why: ROLE_NOT_VALIDATED,
    },
    Known {
        case: "create a Role with a rule without resources",
        real: "422 Invalid",
        double: "201",
        why: ROLE_NOT_VALIDATED,
    },
    Known {
        case: "update a RoleBinding's roleRef",
        real: "422 Invalid",
        double: "200",
        why: NOT_VALIDATED,
    },
    Known {
        case: "patch a RoleBinding's roleRef",
        real: "422 Invalid",
        double: "200",
        why: NOT_VALIDATED,
    },
    Known {
        case: "a JSON merge patch replacing the containers (the image changed)",
        real: "422 Invalid",
        double: "200",
        why: NOT_VALIDATED,
    },
    Known {
        case: "a JSON merge patch of metadata.uid",
        real: "422 Invalid",
        double: "200",
        why: NOT_VALIDATED,
    },
    Known {
        case: "a JSON merge patch of a label to a number",
        real: "422 Invalid",
        double: "200",
        why: NOT_VALIDATED,
    },
    Known {
        case: "a JSON merge patch of nodeName",
        real: "422 Invalid",
        double: "200",
        why: NOT_VALIDATED,
    },
    Known {
        case: "create a ServiceAccount with a label of a value that is a number",
        real: "400 BadRequest",
        double: r#"201; /metadata/labels={"k":1}"#,
        why: NOT_VALIDATED,
    },
    Known {
        case: "create a ServiceAccount with a label of a value that is null",
        real: r#"201; /metadata/labels={"k":""}"#,
        double: r#"201; /metadata/labels={"k":null}"#,
        why: NOT_VALIDATED,
    },
    Known {
        case: "create a ServiceAccount with annotations of a value that is a number",
        real: "400 BadRequest",
        double: "201",
        why: NOT_VALIDATED,
    },
    Known {
        case: "list Pods with labelSelector tier=a/b",
        real: "400 BadRequest",
        double: "200; names []",
        why: SELECTOR_NOT_VALIDATED,
    },
    Known {
        case: "list Pods with labelSelector -tier=a",
        real: "400 BadRequest",
        double: "200; names []",
        why: SELECTOR_NOT_VALIDATED,
    },
    Known {
        case: "a JSON merge patch adding a finalizer to a Pod being deleted",
        real: "422 Invalid",
        double: r#"200; /metadata/finalizers=["corpus.example.com/hold","corpus.example.com/more"]"#,
        why: "the double does not refuse a new finalizer on an object being deleted \
              (ValidateNoNewFinalizers, apimachinery pkg/api/validation/objectmeta.go): the \
              harness adds no finalizers; the real API server is the referee",
    },
    Known {
        case: "create a Lease with leaseDurationSeconds 0",
        real: "422 Invalid",
        double: "201; /spec/leaseDurationSeconds=0",
        why: "the double stores Leases as any object, without ValidateLeaseSpec (kubernetes \
              pkg/apis/coordination/validation/validation.go): the harness's own Leases are \
              created and removed on the real API server (operator.rs), which referees them",
    },
    Known {
        case: "create a Secret whose data is not base64",
        real: "400 BadRequest",
        double: "201",
        why: "the double stores a Secret's data as sent; the real API server's JSON decoder \
              refuses data that is not base64 (k8s-openapi's ByteString encodes the \
              harness's): the real API server is the referee",
    },
    Known {
        case: "create a service-account-token Secret naming no ServiceAccount",
        real: "422 Invalid",
        double: r#"201; /type="kubernetes.io/service-account-token""#,
        why: "the double stores Secrets of every type without ValidateSecret's rules for a \
              token Secret (its kubernetes.io/service-account.name annotation: kubernetes \
              pkg/apis/core/validation/validation.go) and plays no token controller: the \
              harness makes no such Secret (its tokens are TokenRequests)",
    },
    Known {
        case: "watch Pods by fieldSelector metadata.name=watched",
        real: "200; events [ADDED watched]",
        double: "405 MethodNotAllowed",
        why: "the harness never watches (it polls with GETs: the kube_double tests assert that \
              none of its requests is a watch), so the double serves no watch and answers one \
              405 MethodNotAllowed, as the API server answers a watch of a resource whose \
              storage cannot watch (ListResource in apiserver pkg/endpoints/handlers/get.go); \
              the real API server is the referee of watches, bookmarks and the watch cache",
    },
    Known {
        case: "a strategic merge patch of labels",
        real: r#"200; /metadata/labels={"added":"yes","keep":"b"}"#,
        double: "415 UnsupportedMediaType",
        why: ONLY_MERGE_PATCHES,
    },
    Known {
        case: "a JSON patch adding a label",
        real: r#"200; /metadata/labels={"added":"yes","keep":"b","tier":"a"}"#,
        double: "415 UnsupportedMediaType",
        why: ONLY_MERGE_PATCHES,
    },
    Known {
        case: "a server-side apply patch of labels (fieldManager=corpus)",
        real: r#"200; /metadata/labels={"applied":"yes","keep":"b","tier":"a"}"#,
        double: "415 UnsupportedMediaType",
        why: "server-side apply is field ownership kept in every object's managedFields and \
              merged by the structured-merge-diff schema of each type (apiserver \
              pkg/endpoints/handlers/fieldmanager, sigs.k8s.io/structured-merge-diff): a \
              re-implementation of the API server's apply machinery, which no client of the \
              harness sends (it patches with JSON merge patches); the double answers the \
              content type 415 UnsupportedMediaType, as the API server answers a patch type \
              it does not take",
    },
    Known {
        case: "a server-side apply patch without a fieldManager",
        real: "422 Invalid",
        double: "415 UnsupportedMediaType",
        why: "the same: the double does not take application/apply-patch+yaml at all, so it \
              never reaches ValidatePatchOptions' `fieldManager is required for apply patch` \
              (apimachinery pkg/apis/meta/v1/validation/validation.go)",
    },
];

/// The double no longer validates an object's metadata (issue 39): a write the real API
/// server refuses 422 `Invalid` for its name, `generateName`, labels or annotations alone
/// (every cause's field one of theirs; `metadata.finalizers` is not) and the double stores is a known difference, as
/// [`KNOWN`] would list each case with [`NOT_VALIDATED`]. `ValidateObjectMeta` (apimachinery
/// `pkg/api/validation/objectmeta.go`) on the real API server is the referee; the harness's
/// own names and labels are judged there (`names.rs`).
fn metadata_not_validated(real: &Seen, double: &Seen) -> bool {
    const JUDGED: [&str; 4] = [
        "metadata.name",
        "metadata.generateName",
        "metadata.labels",
        "metadata.annotations",
    ];
    real.class == "422 Invalid"
        && !real.invalid_fields.is_empty()
        && real
            .invalid_fields
            .iter()
            .all(|f| JUDGED.iter().any(|j| f.starts_with(j)))
        && double.class.starts_with('2')
}

/// The scheduler no Pod of the corpus names: the real API server's scheduler leaves them
/// alone (no status update, no event races a test's update), as the double does without a
/// runtime; both keep them `Pending` and unbound.
const NO_SCHEDULER: &str = "kandev-corpus-none";

/// One server's answer: the status code and the body (a `Status` for a failure; for a watch,
/// `{"events": [...]}`).
#[derive(Debug, Clone)]
struct Answer {
    code: u16,
    body: Value,
}

impl Answer {
    fn ok(&self) -> bool {
        self.code < 300
    }

    fn reason(&self) -> &str {
        self.body["reason"].as_str().unwrap_or_default()
    }

    /// What the other side must match: the code, and the reason of a failure.
    fn class(&self) -> String {
        if self.ok() {
            self.code.to_string()
        } else {
            format!("{} {}", self.code, self.reason())
        }
    }

    fn message(&self) -> String {
        match self.body["message"].as_str() {
            Some(message) => message.chars().take(300).collect(),
            None => self.body.to_string().chars().take(300).collect(),
        }
    }

    fn rv(&self) -> String {
        self.body["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    fn uid(&self) -> String {
        self.body["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// What one side answered to one case.
#[derive(Debug, Clone)]
struct Seen {
    case: String,
    /// Compared: [`Answer::class`], then the compared fields of a success.
    class: String,
    /// Shown only.
    message: String,
    /// The fields a 422 `Invalid` names (its `details.causes[].field`).
    invalid_fields: Vec<String>,
}

/// One server as a section sees it: its client, its namespace, the run's suffix, and what it
/// answered so far.
#[derive(Clone)]
struct Side {
    client: kube::Client,
    /// The server's kubeconfig and context, for clients of other identities ([`Side::as_account`]).
    kubeconfig: std::path::PathBuf,
    context: String,
    ns: String,
    suffix: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Side {
    /// `/api/v1/namespaces/<ns>/<resource>`.
    fn at(&self, resource: &str) -> String {
        format!("/api/v1/namespaces/{}/{resource}", self.ns)
    }

    fn rbac(&self, resource: &str) -> String {
        format!(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/{}/{resource}",
            self.ns
        )
    }

    async fn send(
        &self,
        method: Method,
        uri: &str,
        content_type: &str,
        body: Option<Vec<u8>>,
    ) -> Answer {
        let request = http::Request::builder()
            .method(method.clone())
            .uri(uri)
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::CONTENT_TYPE, content_type)
            .body(body.map_or_else(kube::client::Body::empty, kube::client::Body::from))
            .unwrap();
        let response = self
            .client
            .send(request)
            .await
            .unwrap_or_else(|e| panic!("{method} {uri}: {e}"));
        let code = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .unwrap_or_else(|e| panic!("{method} {uri}: the body: {e}"))
            .to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Answer { code, body }
    }

    async fn get(&self, uri: &str) -> Answer {
        self.send(Method::GET, uri, "application/json", None).await
    }

    async fn post(&self, uri: &str, body: &Value) -> Answer {
        self.send(
            Method::POST,
            uri,
            "application/json",
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    async fn put(&self, uri: &str, body: &Value) -> Answer {
        self.send(
            Method::PUT,
            uri,
            "application/json",
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    async fn delete(&self, uri: &str, options: Option<&Value>) -> Answer {
        self.send(
            Method::DELETE,
            uri,
            "application/json",
            options.map(|o| o.to_string().into_bytes()),
        )
        .await
    }

    async fn patch(&self, uri: &str, content_type: &str, body: &Value) -> Answer {
        self.send(
            Method::PATCH,
            uri,
            content_type,
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    /// The same side as the ServiceAccount `name` of its namespace: a client sending a token
    /// of a TokenRequest, as a Pod's or a kubeconfig's would.
    async fn as_account(&self, name: &str) -> Side {
        let answer = self
            .post(
                &format!("{}/{name}/token", self.at("serviceaccounts")),
                &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
            )
            .await;
        let token = answer.body["status"]["token"]
            .as_str()
            .unwrap_or_else(|| panic!("a token for {name}: {}", answer.body))
            .to_owned();
        let mut config = kube::config::Kubeconfig::read_from(&self.kubeconfig).unwrap();
        for auth in &mut config.auth_infos {
            auth.auth_info = Some(kube::config::AuthInfo {
                token: Some(token.clone().into()),
                ..Default::default()
            });
        }
        let options = kube::config::KubeConfigOptions {
            context: Some(self.context.clone()),
            ..Default::default()
        };
        let config = kube::Config::from_custom_kubeconfig(config, &options)
            .await
            .unwrap();
        Side {
            client: kube::Client::try_from(config).unwrap(),
            ..self.clone()
        }
    }

    /// A GET of `uri`, `change` applied to the object read, and the PUT of it.
    async fn update(&self, uri: &str, change: impl FnOnce(&mut Value)) -> Answer {
        let mut object = self.get(uri).await.body;
        change(&mut object);
        self.put(uri, &object).await
    }

    /// A watch of `uri` read until the server ends it or `within` has passed.
    async fn watch(&self, uri: &str, within: Duration) -> Answer {
        let request = http::Request::get(uri)
            .header(http::header::ACCEPT, "application/json")
            .body(kube::client::Body::empty())
            .unwrap();
        let response = self
            .client
            .send(request)
            .await
            .unwrap_or_else(|e| panic!("watch {uri}: {e}"));
        let code = response.status().as_u16();
        let mut body = response.into_body();
        let mut bytes = Vec::new();
        let deadline = tokio::time::Instant::now() + within;
        while let Ok(Some(Ok(frame))) = tokio::time::timeout_at(deadline, body.frame()).await {
            if let Ok(data) = frame.into_data() {
                bytes.extend_from_slice(&data);
            }
        }
        if code != 200 {
            let body = serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
            return Answer { code, body };
        }
        let events: Vec<Value> = bytes
            .split(|b| *b == b'\n')
            .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
            .map(|line| {
                serde_json::from_slice(line)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(line).into_owned()))
            })
            .collect();
        Answer {
            code,
            body: json!({ "events": events }),
        }
    }

    /// Records `answer` to `case`, a success with the fields at `pointers`.
    fn note(&self, case: &str, answer: &Answer, pointers: &[&str]) {
        let mut class = answer.class();
        if answer.ok() {
            for pointer in pointers {
                let value = answer
                    .body
                    .pointer(pointer)
                    .map_or_else(|| "-".to_owned(), Value::to_string);
                class.push_str(&format!("; {pointer}={value}"));
            }
        }
        self.record(case, class, answer);
    }

    /// Records a list's answer: its items' names (those starting with `prefix`), sorted.
    fn note_names(&self, case: &str, answer: &Answer, prefix: &str) {
        let mut class = answer.class();
        if answer.ok() {
            let mut names: Vec<&str> = answer.body["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|i| i["metadata"]["name"].as_str())
                .filter(|n| n.starts_with(prefix))
                .collect();
            names.sort_unstable();
            class.push_str(&format!("; names [{}]", names.join(", ")));
        }
        self.record(case, class, answer);
    }

    /// Records a watch's answer: each event's type and object's name.
    fn note_events(&self, case: &str, answer: &Answer) {
        let mut class = answer.class();
        if answer.ok() {
            let events: Vec<String> = answer.body["events"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|event| {
                    format!(
                        "{} {}",
                        event["type"].as_str().unwrap_or("?"),
                        event["object"]["metadata"]["name"].as_str().unwrap_or("?")
                    )
                })
                .collect();
            class.push_str(&format!("; events [{}]", events.join(", ")));
        }
        self.record(case, class, answer);
    }

    fn record(&self, case: &str, class: String, answer: &Answer) {
        let mut seen = self.seen.lock().unwrap();
        assert!(
            seen.iter().all(|s| s.case != case),
            "the case {case:?} is noted twice"
        );
        seen.push(Seen {
            case: case.to_owned(),
            class,
            message: answer.message(),
            invalid_fields: answer.body["details"]["causes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["field"].as_str().map(str::to_owned))
                .collect(),
        });
    }
}

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"schedulerName": NO_SCHEDULER,
            "containers": [{"name": "main", "image": "busybox:1.36"}]}})
}

fn account(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})
}

/// Runs `section` on the real API server and on a double of its own (each in namespaces
/// `<prefix>-<suffix>` and `extra` more), and fails on every difference [`KNOWN`] does not
/// list, and on every entry of [`KNOWN`] about a case that ran and no longer differs.
async fn differential<F, Fut>(prefix: &str, section: F)
where
    F: Fn(Side) -> Fut,
    Fut: Future<Output = ()>,
{
    let real = real_api_server::shared();
    let real_client = real.admin_client().await;
    let double = kandev_test_support::cluster_double::start(None)
        .await
        .unwrap();
    let double_client = kandev_test_support::on_double::admin_client(&double).await;
    let suffix = random_hex(4);
    let ns = format!("{prefix}-{suffix}");
    namespace(&real_client, &ns, json!({})).await;
    namespace(&double_client, &ns, json!({})).await;
    let side = |client: kube::Client, kubeconfig: &std::path::Path, context: &str| Side {
        client,
        kubeconfig: kubeconfig.to_owned(),
        context: context.to_owned(),
        ns: ns.clone(),
        suffix: suffix.clone(),
        seen: Arc::default(),
    };
    let (on_real, on_double) = (
        side(real_client, &real.kubeconfig, &real.context),
        side(double_client, &double.kubeconfig, &double.context),
    );
    tokio::join!(section(on_real.clone()), section(on_double.clone()));
    let on_real = on_real.seen.lock().unwrap().clone();
    let on_double = on_double.seen.lock().unwrap().clone();

    let mut report = Vec::new();
    let mut failures = Vec::new();
    assert_eq!(
        on_real.iter().map(|s| &s.case).collect::<Vec<_>>(),
        on_double.iter().map(|s| &s.case).collect::<Vec<_>>(),
        "both sides ran the same cases"
    );
    for (real, double) in on_real.iter().zip(&on_double) {
        let known = KNOWN.iter().find(|k| k.case == real.case);
        let same = real.class == double.class;
        let unvalidated = metadata_not_validated(real, double);
        report.push(format!(
            "{} {}: real {} | double {}",
            match (same, known) {
                (true, _) => "  ",
                (false, Some(_)) => "~~",
                (false, None) if unvalidated => "~~",
                (false, None) => "!!",
            },
            real.case,
            real.class,
            double.class
        ));
        match (same, known) {
            (true, None) => {}
            (true, Some(_)) => failures.push(format!(
                "{}: listed in KNOWN, but both now answer {} (remove it from the table)",
                real.case, real.class
            )),
            (false, Some(k)) if k.real == real.class && k.double == double.class => {}
            (false, None) if unvalidated => {}
            (false, known) => failures.push(format!(
                "{}:\n    the real API server: {} ({})\n    the double:          {} ({}){}",
                real.case,
                real.class,
                real.message,
                double.class,
                double.message,
                match known {
                    Some(k) => format!(
                        "\n    KNOWN lists other answers: real {}, double {} ({})",
                        k.real, k.double, k.why
                    ),
                    None => String::new(),
                }
            )),
        }
    }
    println!(
        "{prefix} on kube-apiserver {} and the double:\n{}",
        real.version,
        report.join("\n")
    );
    assert!(
        failures.is_empty(),
        "the double answers otherwise than kube-apiserver {}:\n  {}",
        real.version,
        failures.join("\n  ")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_labels_and_annotations_at_every_limit_as_on_a_real_api_server() {
    differential("corpus-names", names_and_labels).await;
}

async fn names_and_labels(side: Side) {
    let pods = side.at("pods");
    let accounts = side.at("serviceaccounts");
    let dotted = format!(
        "{}.{}.{}.{}",
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61)
    );
    let names: Vec<(&str, String)> = vec![
        ("63 chars", "n".repeat(63)),
        ("64 chars", "n".repeat(64)),
        ("253 chars", "n".repeat(253)),
        ("253 chars in four dotted labels", dotted),
        ("254 chars", "n".repeat(254)),
        (
            "a 64-char label before a dot",
            format!("{}.x", "n".repeat(64)),
        ),
        ("uppercase", "Corpus-Name".into()),
        ("a leading dash", "-corpus".into()),
        ("a trailing dash", "corpus-".into()),
        ("dots", "corpus.name.x".into()),
        ("a leading dot", ".corpus".into()),
        ("two dots in a row", "corpus..name".into()),
        ("an underscore", "corpus_name".into()),
        ("a colon", "corpus:name".into()),
        ("no name", String::new()),
    ];
    for (what, name) in &names {
        let answer = side.post(&pods, &pod(name)).await;
        side.note(&format!("create a Pod named with {what}"), &answer, &[]);
        let answer = side.post(&accounts, &account(name)).await;
        side.note(
            &format!("create a ServiceAccount named with {what}"),
            &answer,
            &[],
        );
    }
    let answer = side
        .post(
            &accounts,
            &json!({"metadata": {"generateName": "corpus-generated-"}}),
        )
        .await;
    side.note(
        "create a ServiceAccount with a generateName",
        &answer,
        &["/metadata/generateName"],
    );
    let answer = side
        .post(&accounts, &json!({"metadata": {"generateName": "Corpus-"}}))
        .await;
    side.note(
        "create a ServiceAccount with an uppercase generateName",
        &answer,
        &[],
    );

    // Namespaces: cluster-wide, so every name carries the run's suffix.
    let s = &side.suffix;
    let namespaces: Vec<(&str, String)> = vec![
        ("63 chars", format!("{s}-{}", "n".repeat(62 - s.len()))),
        ("64 chars", format!("{s}-{}", "n".repeat(63 - s.len()))),
        ("253 chars", format!("{s}-{}", "n".repeat(252 - s.len()))),
        ("uppercase", format!("Corpus-{s}")),
        ("a leading dash", format!("-corpus-{s}")),
        ("dots", format!("corpus.{s}")),
        ("an underscore", format!("corpus_{s}")),
    ];
    for (what, name) in &namespaces {
        let answer = side
            .post("/api/v1/namespaces", &json!({"metadata": {"name": name}}))
            .await;
        side.note(
            &format!("create a Namespace named with {what}"),
            &answer,
            &["/status/phase"],
        );
        if answer.ok() {
            side.delete(&format!("/api/v1/namespaces/{name}"), None)
                .await;
        }
    }
    let answer = side
        .post(
            "/api/v1/namespaces",
            &json!({"metadata": {"name": format!("corpus-labelled-{s}"),
                "labels": {"corpus": "v".repeat(64)}}}),
        )
        .await;
    side.note(
        "create a Namespace with a label value of 64 chars",
        &answer,
        &[],
    );

    let prefix = "k".repeat(253);
    let labels: Vec<(&str, Value)> = vec![
        (
            "a key of a 253-char prefix and a 63-char name",
            json!({format!("{prefix}/{}", "n".repeat(63)): "v"}),
        ),
        (
            "a key of a 253-char prefix and a 64-char name",
            json!({format!("{prefix}/{}", "n".repeat(64)): "v"}),
        ),
        (
            "a key of a 254-char prefix",
            json!({format!("{}/n", "k".repeat(254)): "v"}),
        ),
        ("a key of 63 chars", json!({"n".repeat(63): "v"})),
        ("a key of 64 chars", json!({"n".repeat(64): "v"})),
        ("an empty key prefix", json!({"/name": "v"})),
        ("an uppercase key prefix", json!({"Example.com/name": "v"})),
        (
            "an uppercase key name",
            json!({"example.com/Name_x.y": "v"}),
        ),
        ("two slashes in a key", json!({"a/b/c": "v"})),
        ("an empty key", json!({"": "v"})),
        ("a key ending in a dash", json!({"name-": "v"})),
        ("a value of 63 chars", json!({"k": "v".repeat(63)})),
        ("a value of 64 chars", json!({"k": "v".repeat(64)})),
        ("an empty value", json!({"k": ""})),
        ("a value with a space", json!({"k": "a b"})),
        ("a value with a slash", json!({"k": "a/b"})),
        ("a value with a leading dash", json!({"k": "-a"})),
        (
            "a value of dots, dashes and underscores",
            json!({"k": "A._-z"}),
        ),
        ("a value that is a number", json!({"k": 1})),
        ("a value that is null", json!({"k": null})),
    ];
    for (i, (what, labels)) in labels.into_iter().enumerate() {
        let answer = side
            .post(
                &accounts,
                &json!({"metadata": {"name": format!("labels-{i}"), "labels": labels}}),
            )
            .await;
        side.note(
            &format!("create a ServiceAccount with a label of {what}"),
            &answer,
            &["/metadata/labels"],
        );
    }
    let answer = side
        .post(
            &pods,
            &json!({"metadata": {"name": "labelled", "labels": {"k": "v".repeat(64)}},
                "spec": pod("x")["spec"]}),
        )
        .await;
    side.note("create a Pod with a label value of 64 chars", &answer, &[]);

    let key = "corpus.example.com/big";
    let limit = 256 * 1024;
    let annotations: Vec<(&str, Value)> = vec![
        (
            "exactly 256 KiB in all",
            json!({key: "x".repeat(limit - key.len())}),
        ),
        (
            "1 byte over 256 KiB in all",
            json!({key: "x".repeat(limit - key.len() + 1)}),
        ),
        (
            "over 256 KiB in two",
            json!({"a": "x".repeat(200 * 1024), "b": "x".repeat(100 * 1024)}),
        ),
        ("a key with a space", json!({"not a key": "v"})),
        (
            "an uppercase key (checked lowercased)",
            json!({"Corpus.Example.com/Key": "v"}),
        ),
        ("a key of 64 chars", json!({"n".repeat(64): "v"})),
        ("an empty key", json!({"": "v"})),
        ("an empty value", json!({"k": ""})),
        (
            "a value of any characters",
            json!({"k": "any: thing / at all \n"}),
        ),
        ("a value that is a number", json!({"k": 1})),
    ];
    for (i, (what, annotations)) in annotations.into_iter().enumerate() {
        let answer = side
            .post(
                &accounts,
                &json!({"metadata": {"name": format!("annotations-{i}"),
                    "annotations": annotations}}),
            )
            .await;
        side.note(
            &format!("create a ServiceAccount with annotations of {what}"),
            &answer,
            &[],
        );
    }
    // Over the limit on an update too.
    side.post(&accounts, &account("annotated")).await;
    let answer = side
        .update(&format!("{accounts}/annotated"), |a| {
            a["metadata"]["annotations"] = json!({key: "x".repeat(limit)});
        })
        .await;
    side.note(
        "update a ServiceAccount to annotations over 256 KiB",
        &answer,
        &[],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immutable_fields_and_conflicts_as_on_a_real_api_server() {
    differential("corpus-updates", updates_and_conflicts).await;
}

/// An update's case: its name, the change made to the object read, the fields compared.
type UpdateCase = (
    &'static str,
    Box<dyn FnOnce(&mut Value) + Send>,
    &'static [&'static str],
);

async fn updates_and_conflicts(side: Side) {
    let pods = side.at("pods");
    let accounts = side.at("serviceaccounts");
    let pod_cases: Vec<UpdateCase> = vec![
        (
            "update a Pod's container image",
            Box::new(|p| p["spec"]["containers"][0]["image"] = json!("busybox:1.37")),
            &["/spec/containers/0/image", "/metadata/generation"],
        ),
        (
            "update a Pod's container name",
            Box::new(|p| p["spec"]["containers"][0]["name"] = json!("renamed")),
            &[],
        ),
        (
            "update a Pod's nodeName",
            Box::new(|p| p["spec"]["nodeName"] = json!("some-node")),
            &[],
        ),
        (
            "update a Pod's volumes (one added)",
            Box::new(|p| {
                p["spec"]["volumes"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "added", "emptyDir": {}}));
            }),
            &[],
        ),
        (
            "update a Pod's activeDeadlineSeconds (set)",
            Box::new(|p| p["spec"]["activeDeadlineSeconds"] = json!(600)),
            &["/spec/activeDeadlineSeconds", "/metadata/generation"],
        ),
        (
            "update a Pod's tolerations (one added)",
            Box::new(|p| {
                // Onto the real server's DefaultTolerationSeconds ones; the double adds none.
                let mut tolerations = p["spec"]["tolerations"].as_array().cloned();
                let added = json!({"key": "corpus", "operator": "Exists", "effect": "NoSchedule"});
                tolerations.get_or_insert_default().push(added);
                p["spec"]["tolerations"] = json!(tolerations);
            }),
            &["/spec/tolerations", "/metadata/generation"],
        ),
        (
            "update a Pod's tolerations (one removed)",
            Box::new(|p| {
                if let Some(tolerations) = p["spec"]["tolerations"].as_array_mut() {
                    tolerations.pop();
                }
            }),
            &[],
        ),
        (
            "update a Pod's restartPolicy",
            Box::new(|p| p["spec"]["restartPolicy"] = json!("Never")),
            &[],
        ),
        (
            "update a Pod's container resources",
            Box::new(|p| {
                p["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "1"}});
            }),
            &[],
        ),
        (
            "update a Pod's labels",
            Box::new(|p| p["metadata"]["labels"] = json!({"corpus": "updated"})),
            &["/metadata/labels", "/metadata/generation"],
        ),
        (
            "update a Pod's status (ignored on the Pod itself)",
            Box::new(|p| p["status"]["phase"] = json!("Running")),
            &["/status/phase"],
        ),
        (
            "update a Pod's metadata.uid",
            Box::new(|p| p["metadata"]["uid"] = json!("00000000-0000-4000-8000-000000000001")),
            &[],
        ),
        (
            "update a Pod's metadata.generation (ignored)",
            Box::new(|p| p["metadata"]["generation"] = json!(7)),
            &["/metadata/generation"],
        ),
        (
            "update a Pod without its metadata.uid",
            Box::new(|p| {
                p["metadata"].as_object_mut().unwrap().remove("uid");
            }),
            &[],
        ),
    ];
    for (i, (case, change, pointers)) in pod_cases.into_iter().enumerate() {
        let name = format!("immutable-{i}");
        side.post(&pods, &pod(&name)).await;
        let answer = side.update(&format!("{pods}/{name}"), change).await;
        side.note(case, &answer, pointers);
    }

    let account_cases: Vec<UpdateCase> = vec![
        (
            "update a ServiceAccount's labels and automountServiceAccountToken",
            Box::new(|a| {
                a["metadata"]["labels"] = json!({"corpus": "updated"});
                a["automountServiceAccountToken"] = json!(false);
            }),
            &["/metadata/labels", "/automountServiceAccountToken"],
        ),
        (
            "update a ServiceAccount's metadata.uid",
            Box::new(|a| a["metadata"]["uid"] = json!("00000000-0000-4000-8000-000000000001")),
            &[],
        ),
        (
            "update a ServiceAccount's metadata.creationTimestamp (ignored)",
            Box::new(|a| a["metadata"]["creationTimestamp"] = json!("2001-01-01T00:00:00Z")),
            &[],
        ),
        (
            "update a ServiceAccount whose body names another object",
            Box::new(|a| a["metadata"]["name"] = json!("another")),
            &[],
        ),
        (
            "update a ServiceAccount whose body names another namespace",
            Box::new(|a| a["metadata"]["namespace"] = json!("another")),
            &[],
        ),
        (
            "update a ServiceAccount whose body has no namespace",
            Box::new(|a| {
                a["metadata"].as_object_mut().unwrap().remove("namespace");
            }),
            &[],
        ),
        (
            "update a ServiceAccount whose body is of another kind",
            Box::new(|a| a["kind"] = json!("Secret")),
            &[],
        ),
        (
            "update a ServiceAccount whose body has no kind",
            Box::new(|a| {
                let a = a.as_object_mut().unwrap();
                a.remove("kind");
                a.remove("apiVersion");
            }),
            &["/kind"],
        ),
    ];
    for (i, (case, change, pointers)) in account_cases.into_iter().enumerate() {
        let name = format!("account-{i}");
        side.post(&accounts, &account(&name)).await;
        let answer = side.update(&format!("{accounts}/{name}"), change).await;
        side.note(case, &answer, pointers);
    }
    let answer = side
        .post(
            &accounts,
            &json!({"metadata": {"name": "elsewhere", "namespace": "another"}}),
        )
        .await;
    side.note(
        "create a ServiceAccount whose body names another namespace",
        &answer,
        &[],
    );
    let answer = side
        .post(
            &accounts,
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kind"}}),
        )
        .await;
    side.note(
        "create a ServiceAccount whose body is of another kind",
        &answer,
        &[],
    );

    // A RoleBinding's roleRef is immutable; its subjects are not.
    let roles = side.rbac("roles");
    let bindings = side.rbac("rolebindings");
    for role in ["corpus-a", "corpus-b"] {
        side.post(
            &roles,
            &json!({"metadata": {"name": role},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
        )
        .await;
    }
    // A Role's rules, which the double stores as sent (`ROLE_NOT_VALIDATED`).
    let role_cases = [
        (
            "without verbs",
            json!({"apiGroups": [""], "resources": ["pods"]}),
        ),
        (
            "with nonResourceURLs",
            json!({"nonResourceURLs": ["/metrics"], "verbs": ["get"]}),
        ),
        (
            "without apiGroups",
            json!({"resources": ["pods"], "verbs": ["get"]}),
        ),
        (
            "without resources",
            json!({"apiGroups": [""], "verbs": ["get"]}),
        ),
    ];
    for (i, (case, rule)) in role_cases.into_iter().enumerate() {
        let role = json!({"metadata": {"name": format!("corpus-rule-{i}")}, "rules": [rule]});
        let answer = side.post(&roles, &role).await;
        side.note(&format!("create a Role with a rule {case}"), &answer, &[]);
    }
    let binding = |name: &str| {
        json!({"metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "corpus-a"},
            "subjects": [{"kind": "ServiceAccount", "name": "default"}]})
    };
    for name in ["roleref", "subjects"] {
        let answer = side.post(&bindings, &binding(name)).await;
        side.note(&format!("create the RoleBinding {name}"), &answer, &[]);
    }
    let answer = side
        .update(&format!("{bindings}/roleref"), |b| {
            b["roleRef"]["name"] = json!("corpus-b");
        })
        .await;
    side.note("update a RoleBinding's roleRef", &answer, &[]);
    let answer = side
        .update(&format!("{bindings}/subjects"), |b| {
            b["subjects"] =
                json!([{"kind": "ServiceAccount", "name": "other", "namespace": "elsewhere"}]);
        })
        .await;
    side.note("update a RoleBinding's subjects", &answer, &["/subjects"]);
    let answer = side
        .patch(
            &format!("{bindings}/roleref"),
            "application/merge-patch+json",
            &json!({"roleRef": {"name": "corpus-b"}}),
        )
        .await;
    side.note("patch a RoleBinding's roleRef", &answer, &[]);

    // Conflicts and preconditions.
    let conflict = format!("{accounts}/conflict");
    let created = side.post(&accounts, &account("conflict")).await;
    side.note("create the ServiceAccount conflict", &created, &[]);
    let again = side.post(&accounts, &account("conflict")).await;
    side.note("create a ServiceAccount that exists", &again, &[]);
    let first = side.get(&conflict).await;
    let stale = first.body.clone();
    let answer = side
        .update(&conflict, |a| a["metadata"]["labels"] = json!({"n": "1"}))
        .await;
    side.note(
        "update with the current resourceVersion",
        &answer,
        &["/metadata/labels"],
    );
    let mut object = stale.clone();
    object["metadata"]["labels"] = json!({"n": "2"});
    let answer = side.put(&conflict, &object).await;
    side.note("update with a stale resourceVersion", &answer, &[]);
    object["metadata"]["resourceVersion"] = json!("not-a-number");
    let answer = side.put(&conflict, &object).await;
    side.note(
        "update with a resourceVersion that is not a number",
        &answer,
        &[],
    );
    object["metadata"]["resourceVersion"] = json!("");
    object["metadata"]["labels"] = json!({"n": "3"});
    let answer = side.put(&conflict, &object).await;
    side.note(
        "update without a resourceVersion",
        &answer,
        &["/metadata/labels"],
    );
    let answer = side
        .patch(
            &conflict,
            "application/merge-patch+json",
            &json!({"metadata": {"resourceVersion": first.rv(), "labels": {"n": "4"}}}),
        )
        .await;
    side.note("patch with a stale resourceVersion", &answer, &[]);
    let answer = side
        .delete(
            &conflict,
            Some(&json!({"preconditions": {"resourceVersion": first.rv()}})),
        )
        .await;
    side.note(
        "delete with a stale resourceVersion precondition",
        &answer,
        &[],
    );
    let answer = side
        .delete(
            &conflict,
            Some(&json!({"preconditions": {"uid": "00000000-0000-4000-8000-000000000001"}})),
        )
        .await;
    side.note("delete with another uid as precondition", &answer, &[]);
    let current = side.get(&conflict).await;
    let answer = side
        .delete(
            &conflict,
            Some(
                &json!({"preconditions": {"uid": current.uid(), "resourceVersion": current.rv()}}),
            ),
        )
        .await;
    side.note("delete with the current preconditions", &answer, &[]);

    let missing = format!("{accounts}/missing");
    side.note("get a missing object", &side.get(&missing).await, &[]);
    side.note(
        "delete a missing object",
        &side.delete(&missing, None).await,
        &[],
    );
    side.note(
        "update a missing object",
        &side.put(&missing, &account("missing")).await,
        &[],
    );
    side.note(
        "patch a missing object",
        &side
            .patch(
                &missing,
                "application/merge-patch+json",
                &json!({"metadata": {"labels": {"a": "b"}}}),
            )
            .await,
        &[],
    );
    let elsewhere = format!("/api/v1/namespaces/corpus-missing-{}", side.suffix);
    side.note(
        "get an object in a missing namespace",
        &side
            .get(&format!("{elsewhere}/serviceaccounts/default"))
            .await,
        &[],
    );
    side.note(
        "create an object in a missing namespace",
        &side
            .post(&format!("{elsewhere}/serviceaccounts"), &account("x"))
            .await,
        &[],
    );
    let answer = side.get(&format!("{elsewhere}/serviceaccounts")).await;
    side.note_names("list a missing namespace", &answer, "");
    side.note(
        "get a resource the server does not have",
        &side.get(&side.at("nosuchthings")).await,
        &[],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_runs_leave_nothing_behind_as_on_a_real_api_server() {
    differential("corpus-dry-runs", dry_runs).await;
}

async fn dry_runs(side: Side) {
    let pods = side.at("pods");
    let accounts = side.at("serviceaccounts");
    let dry = "?dryRun=All";

    let answer = side
        .post(&format!("{accounts}{dry}"), &account("dry"))
        .await;
    side.note(
        "dry-run create of a ServiceAccount",
        &answer,
        &["/metadata/name"],
    );
    let answer = side.get(&format!("{accounts}/dry")).await;
    side.note(
        "get after a dry-run create of a ServiceAccount",
        &answer,
        &[],
    );
    let answer = side.post(&format!("{pods}{dry}"), &pod("dry")).await;
    side.note(
        "dry-run create of a Pod",
        &answer,
        &[
            "/spec/containers/0/image",
            "/spec/serviceAccountName",
            "/status/phase",
        ],
    );
    let answer = side.get(&format!("{pods}/dry")).await;
    side.note("get after a dry-run create of a Pod", &answer, &[]);
    let ns = format!("corpus-dry-{}", side.suffix);
    let answer = side
        .post(
            &format!("/api/v1/namespaces{dry}"),
            &json!({"metadata": {"name": ns}}),
        )
        .await;
    side.note("dry-run create of a Namespace", &answer, &["/status/phase"]);
    let answer = side.get(&format!("/api/v1/namespaces/{ns}")).await;
    side.note("get after a dry-run create of a Namespace", &answer, &[]);

    side.post(&accounts, &account("kept")).await;
    side.post(&pods, &pod("kept")).await;
    let kept = format!("{accounts}/kept");
    let answer = side
        .post(&format!("{accounts}{dry}"), &account("kept"))
        .await;
    side.note("dry-run create of an existing name", &answer, &[]);
    let answer = side
        .post(&format!("{accounts}{dry}"), &account("Not-Valid"))
        .await;
    side.note("dry-run create of an invalid name", &answer, &[]);
    let answer = side
        .update(&format!("{kept}{dry}"), |a| {
            a["metadata"]["labels"] = json!({"dry": "run"});
        })
        .await;
    side.note(
        "dry-run update of a ServiceAccount",
        &answer,
        &["/metadata/labels"],
    );
    let answer = side.get(&kept).await;
    side.note("get after a dry-run update", &answer, &["/metadata/labels"]);
    let answer = side
        .patch(
            &format!("{kept}{dry}"),
            "application/merge-patch+json",
            &json!({"metadata": {"labels": {"dry": "patch"}}}),
        )
        .await;
    side.note(
        "dry-run patch of a ServiceAccount",
        &answer,
        &["/metadata/labels"],
    );
    let answer = side.get(&kept).await;
    side.note("get after a dry-run patch", &answer, &["/metadata/labels"]);
    let answer = side.delete(&format!("{kept}{dry}"), None).await;
    side.note("dry-run delete of a ServiceAccount", &answer, &[]);
    let answer = side.get(&kept).await;
    side.note(
        "get after a dry-run delete of a ServiceAccount",
        &answer,
        &["/metadata/deletionTimestamp"],
    );
    let answer = side
        .delete(
            &kept,
            Some(&json!({"dryRun": ["All"], "kind": "DeleteOptions", "apiVersion": "v1"})),
        )
        .await;
    side.note(
        "dry-run delete of a ServiceAccount, dryRun in DeleteOptions",
        &answer,
        &[],
    );
    let answer = side.get(&kept).await;
    side.note(
        "get after a dry-run delete in DeleteOptions",
        &answer,
        &["/metadata/deletionTimestamp"],
    );
    let answer = side.delete(&format!("{pods}/kept{dry}"), None).await;
    side.note("dry-run delete of a Pod", &answer, &[]);
    let answer = side.get(&format!("{pods}/kept")).await;
    side.note(
        "get after a dry-run delete of a Pod",
        &answer,
        &["/metadata/deletionTimestamp"],
    );
    let answer = side
        .delete(&format!("/api/v1/namespaces/{}{dry}", side.ns), None)
        .await;
    side.note("dry-run delete of a Namespace", &answer, &[]);
    let answer = side.get(&format!("/api/v1/namespaces/{}", side.ns)).await;
    side.note(
        "get after a dry-run delete of a Namespace",
        &answer,
        &["/status/phase"],
    );
    // A Job's DELETE is its own handler in the double (its Pods go with it, whatever the policy).
    let jobs = format!("/apis/batch/v1/namespaces/{}/jobs", side.ns);
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "kept"},
        "spec": {"backoffLimit": 0, "template": {"spec": {"schedulerName": NO_SCHEDULER,
            "restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36"}]}}}});
    let answer = side.post(&jobs, &job).await;
    side.note("create a Job", &answer, &[]);
    let mut defaulted = job.clone();
    defaulted["metadata"]["name"] = json!("defaulted");
    defaulted["spec"]
        .as_object_mut()
        .unwrap()
        .remove("backoffLimit");
    let answer = side.post(&jobs, &defaulted).await;
    side.note(
        "create a Job whose backoffLimit is left to its default",
        &answer,
        &[],
    );
    let answer = side
        .delete(&format!("{jobs}/kept"), Some(&json!({"dryRun": ["All"]})))
        .await;
    side.note(
        "dry-run delete of a Job, no propagation policy",
        &answer,
        &[],
    );
    let answer = side
        .delete(
            &format!("{jobs}/kept"),
            Some(&json!({"dryRun": ["All"], "propagationPolicy": "Background"})),
        )
        .await;
    side.note("dry-run delete of a Job, in the background", &answer, &[]);
    let answer = side.get(&format!("{jobs}/kept")).await;
    side.note(
        "get after a dry-run delete of a Job",
        &answer,
        &["/metadata/deletionTimestamp"],
    );
    let answer = side.delete(&format!("{accounts}/missing{dry}"), None).await;
    side.note("dry-run delete of a missing object", &answer, &[]);
    let answer = side
        .post(&format!("{accounts}?dryRun=Bogus"), &account("bogus"))
        .await;
    side.note("create with dryRun=Bogus", &answer, &[]);
    let answer = side.get(&format!("{accounts}/bogus")).await;
    side.note("get after a create with dryRun=Bogus", &answer, &[]);
    let answer = side.delete(&format!("{kept}?dryRun=Bogus"), None).await;
    side.note("delete with dryRun=Bogus", &answer, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_patches_as_on_a_real_api_server_and_other_patch_types_refused() {
    differential("corpus-patches", patches).await;
}

async fn patches(side: Side) {
    let pods = side.at("pods");
    const MERGE: &str = "application/merge-patch+json";
    let labelled = |name: &str| {
        let mut p = pod(name);
        p["metadata"]["labels"] = json!({"tier": "a", "keep": "b"});
        p
    };
    let cases: Vec<(&str, &str, Value, &[&str])> = vec![
        (
            "a JSON merge patch of labels",
            MERGE,
            json!({"metadata": {"labels": {"added": "yes", "tier": null}}}),
            &["/metadata/labels"],
        ),
        (
            "a JSON merge patch of activeDeadlineSeconds",
            MERGE,
            json!({"spec": {"activeDeadlineSeconds": 300}}),
            &["/spec/activeDeadlineSeconds", "/metadata/generation"],
        ),
        (
            "a JSON merge patch replacing the containers (the image changed)",
            MERGE,
            json!({"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}),
            &[],
        ),
        (
            "a JSON merge patch of metadata.uid",
            MERGE,
            json!({"metadata": {"uid": "00000000-0000-4000-8000-000000000001"}}),
            &[],
        ),
        (
            "a JSON merge patch of metadata.name",
            MERGE,
            json!({"metadata": {"name": "renamed"}}),
            &[],
        ),
        (
            "a JSON merge patch of a label to a number",
            MERGE,
            json!({"metadata": {"labels": {"tier": 1}}}),
            &[],
        ),
        (
            "a JSON merge patch adding a finalizer",
            MERGE,
            json!({"metadata": {"finalizers": ["corpus.example.com/hold"]}}),
            &["/metadata/finalizers"],
        ),
        (
            "a JSON merge patch of nodeName",
            MERGE,
            json!({"spec": {"nodeName": "some-node"}}),
            &[],
        ),
        (
            "a JSON merge patch that is a list",
            MERGE,
            json!([{"op": "add", "path": "/metadata/labels/x", "value": "y"}]),
            &[],
        ),
        (
            "an empty JSON merge patch",
            MERGE,
            json!({}),
            &["/metadata/labels", "/metadata/generation"],
        ),
        // The other patch types: the double refuses them (`KNOWN`).
        (
            "a strategic merge patch of labels",
            "application/strategic-merge-patch+json",
            json!({"metadata": {"labels": {"added": "yes", "tier": null}}}),
            &["/metadata/labels"],
        ),
        (
            "a JSON patch adding a label",
            "application/json-patch+json",
            json!([{"op": "add", "path": "/metadata/labels/added", "value": "yes"}]),
            &["/metadata/labels"],
        ),
    ];
    for (i, (case, content_type, patch, pointers)) in cases.into_iter().enumerate() {
        let name = format!("patched-{i}");
        side.post(&pods, &labelled(&name)).await;
        let answer = side
            .patch(&format!("{pods}/{name}"), content_type, &patch)
            .await;
        side.note(case, &answer, pointers);
    }
    side.post(&pods, &labelled("raw")).await;
    let raw = format!("{pods}/raw");
    for (case, content_type, body) in [
        ("a merge patch that is not JSON", MERGE, "{\"metadata\":"),
        (
            "a patch of an unsupported content type",
            "text/plain",
            "metadata: {}",
        ),
    ] {
        let answer = side
            .send(
                Method::PATCH,
                &raw,
                content_type,
                Some(body.as_bytes().to_vec()),
            )
            .await;
        side.note(case, &answer, &[]);
    }
    side.post(&pods, &labelled("applied")).await;
    for (case, query) in [
        (
            "a server-side apply patch of labels (fieldManager=corpus)",
            "?fieldManager=corpus",
        ),
        ("a server-side apply patch without a fieldManager", ""),
    ] {
        let answer = side
            .patch(
                &format!("{pods}/applied{query}"),
                "application/apply-patch+yaml",
                &json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "applied", "labels": {"applied": "yes"}}}),
            )
            .await;
        side.note(case, &answer, &["/metadata/labels"]);
    }
    let answer = side
        .patch(
            &format!("{pods}/raw?dryRun=All"),
            MERGE,
            &json!({"metadata": {"labels": {"dry": "run"}}}),
        )
        .await;
    side.note(
        "a dry-run merge patch of a Pod",
        &answer,
        &["/metadata/labels"],
    );
    let answer = side.get(&raw).await;
    side.note(
        "get after a dry-run merge patch of a Pod",
        &answer,
        &["/metadata/labels"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_and_label_selectors_as_on_a_real_api_server() {
    differential("corpus-selectors", selectors).await;
}

async fn selectors(side: Side) {
    let pods = side.at("pods");
    let accounts = side.at("serviceaccounts");
    for (name, labels) in [
        ("sel-a", json!({"tier": "a"})),
        ("sel-b", json!({"tier": "b", "extra": "x"})),
        ("sel-c", json!({})),
    ] {
        let mut p = pod(name);
        p["metadata"]["labels"] = labels;
        side.post(&pods, &p).await;
    }
    let ns = side.ns.clone();
    let pod_fields = [
        "metadata.name=sel-a",
        "metadata.name==sel-a",
        "metadata.name!=sel-a",
        &format!("metadata.namespace={ns}"),
        "metadata.namespace=elsewhere",
        "status.phase=Pending",
        "status.phase!=Pending",
        "status.phase=Running",
        "spec.nodeName=",
        "spec.nodeName=some-node",
        &format!("spec.schedulerName={NO_SCHEDULER}"),
        "spec.restartPolicy=Always",
        "spec.serviceAccountName=default",
        "spec.hostNetwork=false",
        "status.podIP=",
        "status.nominatedNodeName=",
        "metadata.name=sel-a,status.phase=Pending",
        "metadata.name=sel-a,metadata.name=sel-b",
        "spec.containers=x",
        "metadata.labels=x",
        "metadata.name",
        "metadata.name in (sel-a)",
        "=sel-a",
    ];
    for selector in pod_fields {
        let answer = side
            .get(&format!("{pods}?fieldSelector={}", encode(selector)))
            .await;
        side.note_names(
            &format!("list Pods with fieldSelector {selector}"),
            &answer,
            "sel-",
        );
    }
    for selector in [
        "tier=a",
        "tier==a",
        "tier!=a",
        "tier",
        "!tier",
        "tier in (a,b)",
        "tier notin (a)",
        "tier in (a),extra",
        "tier,!extra",
        "tier in a",
        "tier=a b",
        "Tier=a",
        "tier=",
        "tier=a/b",
        "-tier=a",
    ] {
        let answer = side
            .get(&format!("{pods}?labelSelector={}", encode(selector)))
            .await;
        side.note_names(
            &format!("list Pods with labelSelector {selector}"),
            &answer,
            "sel-",
        );
    }

    // Events about two objects of the namespace (ServiceAccounts: nothing else reports on
    // them), selected by their involved object.
    let mut uids = Vec::new();
    for name in ["ev-subject-a", "ev-subject-b"] {
        uids.push(side.post(&accounts, &account(name)).await.uid());
    }
    let events = side.at("events");
    for (i, (subject, uid)) in ["ev-subject-a", "ev-subject-b"]
        .iter()
        .zip(&uids)
        .enumerate()
    {
        let (reason, kind) = [("CorpusA", "Normal"), ("CorpusB", "Warning")][i];
        let answer = side
            .post(
                &events,
                &json!({"apiVersion": "v1", "kind": "Event",
                    "metadata": {"name": format!("corpus-event-{i}")},
                    "involvedObject": {"apiVersion": "v1", "kind": "ServiceAccount",
                        "namespace": ns, "name": subject, "uid": uid},
                    "reason": reason, "message": "a corpus event", "type": kind,
                    "source": {"component": "kandev-corpus"}, "count": 1,
                    "firstTimestamp": "2026-01-01T00:00:00Z",
                    "lastTimestamp": "2026-01-01T00:00:00Z"}),
            )
            .await;
        side.note(&format!("create the Event corpus-event-{i}"), &answer, &[]);
    }
    let answer = side
        .post(
            &events,
            &json!({"metadata": {"name": "corpus-event-elsewhere"},
                "involvedObject": {"kind": "ServiceAccount", "namespace": "elsewhere",
                    "name": "x"},
                "reason": "Corpus", "message": "m", "type": "Normal"}),
        )
        .await;
    side.note(
        "create an Event about an object of another namespace",
        &answer,
        &[],
    );
    let uid_a = uids.first().cloned().unwrap_or_default();
    let event_fields = [
        (
            "involvedObject.uid=<uid of ev-subject-a>",
            format!("involvedObject.uid={uid_a}"),
        ),
        (
            "involvedObject.name=ev-subject-b",
            "involvedObject.name=ev-subject-b".to_owned(),
        ),
        (
            "involvedObject.kind=ServiceAccount",
            "involvedObject.kind=ServiceAccount".to_owned(),
        ),
        (
            "involvedObject.namespace=<ns>",
            format!("involvedObject.namespace={ns}"),
        ),
        (
            "involvedObject.apiVersion=v1",
            "involvedObject.apiVersion=v1".to_owned(),
        ),
        (
            "involvedObject.fieldPath=",
            "involvedObject.fieldPath=".to_owned(),
        ),
        (
            "involvedObject.resourceVersion=",
            "involvedObject.resourceVersion=".to_owned(),
        ),
        ("reason=CorpusB", "reason=CorpusB".to_owned()),
        ("type=Warning", "type=Warning".to_owned()),
        ("source=kandev-corpus", "source=kandev-corpus".to_owned()),
        ("reportingComponent=", "reportingComponent=".to_owned()),
        (
            "involvedObject.uid=<uid of ev-subject-a>,reason=CorpusA",
            format!("involvedObject.uid={uid_a},reason=CorpusA"),
        ),
        (
            "metadata.name=corpus-event-1",
            "metadata.name=corpus-event-1".to_owned(),
        ),
        ("involvedObject.foo=x", "involvedObject.foo=x".to_owned()),
        ("spec.nodeName=", "spec.nodeName=".to_owned()),
    ];
    for (shown, selector) in event_fields {
        let answer = side
            .get(&format!("{events}?fieldSelector={}", encode(&selector)))
            .await;
        side.note_names(
            &format!("list Events with fieldSelector {shown}"),
            &answer,
            "corpus-event-",
        );
    }
    let answer = side
        .get(&format!(
            "{accounts}?fieldSelector={}",
            encode("metadata.name=ev-subject-a")
        ))
        .await;
    side.note_names(
        "list ServiceAccounts with fieldSelector metadata.name=ev-subject-a",
        &answer,
        "",
    );
    let answer = side
        .get(&format!(
            "{accounts}?fieldSelector={}",
            encode("spec.nodeName=")
        ))
        .await;
    side.note_names(
        "list ServiceAccounts with fieldSelector spec.nodeName=",
        &answer,
        "",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_as_on_a_real_api_server_but_for_their_validation() {
    differential("corpus-leases", leases).await;
}

/// Leases, which a run holds while it is alive: the double stores them unvalidated ([`KNOWN`]).
async fn leases(side: Side) {
    let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{}/leases", side.ns);
    for seconds in [0, 60] {
        let answer = side
            .post(
                &leases,
                &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": format!("lease-{seconds}")},
                    "spec": {"holderIdentity": "corpus", "leaseDurationSeconds": seconds}}),
            )
            .await;
        side.note(
            &format!("create a Lease with leaseDurationSeconds {seconds}"),
            &answer,
            &["/spec/leaseDurationSeconds"],
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_as_on_a_real_api_server_but_for_data_not_base64_and_token_secrets() {
    differential("corpus-secrets", secrets).await;
}

/// Secrets, which carry a launched run's inputs: `stringData` merged into `data`, `type`
/// defaulted; `data` that is not base64 and a service-account-token Secret without its
/// account, which the double stores ([`KNOWN`]).
async fn secrets(side: Side) {
    let secrets = side.at("secrets");
    let answer = side
        .post(
            &secrets,
            &json!({"metadata": {"name": "merged"},
                "data": {"kept": "a2VwdA==", "over": "b2xk"},
                "stringData": {"over": "new", "added": "s3cret"}}),
        )
        .await;
    side.note(
        "create a Secret with stringData over data",
        &answer,
        &["/data", "/stringData", "/type"],
    );
    let answer = side
        .post(
            &secrets,
            &json!({"metadata": {"name": "not-base64"}, "data": {"a": "not base64!"}}),
        )
        .await;
    side.note("create a Secret whose data is not base64", &answer, &[]);
    let answer = side
        .post(
            &secrets,
            &json!({"metadata": {"name": "token"}, "type": "kubernetes.io/service-account-token"}),
        )
        .await;
    side.note(
        "create a service-account-token Secret naming no ServiceAccount",
        &answer,
        &["/type"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_as_on_a_real_api_server_but_for_a_new_one_while_deleting() {
    differential("corpus-finalizers", finalizers).await;
}

/// Finalizers, which the twins' stuck node agent puts on a Pod: a DELETE marks the Pod and
/// keeps it, a finalizer added meanwhile (which the double stores: [`KNOWN`]), and the
/// update that removes the last deletes it.
async fn finalizers(side: Side) {
    const MERGE: &str = "application/merge-patch+json";
    let pods = side.at("pods");
    let mut held = pod("held");
    held["metadata"]["finalizers"] = json!(["corpus.example.com/hold"]);
    let answer = side.post(&pods, &held).await;
    side.note(
        "create a Pod with a finalizer",
        &answer,
        &["/metadata/finalizers"],
    );
    let answer = side.delete(&format!("{pods}/held"), None).await;
    side.note(
        "delete a Pod with a finalizer",
        &answer,
        &[
            "/metadata/finalizers",
            "/metadata/deletionGracePeriodSeconds",
        ],
    );
    // A second DELETE of an object being deleted changes nothing (`rest.BeforeDelete`).
    let marked = answer.rv();
    let mut again = side.delete(&format!("{pods}/held"), None).await;
    again.body["unchanged"] = json!(again.rv() == marked);
    side.note(
        "delete a Pod with a finalizer again",
        &again,
        &["/unchanged", "/metadata/finalizers"],
    );
    let answer = side
        .patch(
            &format!("{pods}/held"),
            MERGE,
            &json!({"metadata": {"finalizers":
                ["corpus.example.com/hold", "corpus.example.com/more"]}}),
        )
        .await;
    side.note(
        "a JSON merge patch adding a finalizer to a Pod being deleted",
        &answer,
        &["/metadata/finalizers"],
    );
    let answer = side
        .patch(
            &format!("{pods}/held"),
            MERGE,
            &json!({"metadata": {"finalizers": null}}),
        )
        .await;
    side.note(
        "a JSON merge patch removing the finalizers of a Pod being deleted",
        &answer,
        &[],
    );
    let answer = side.get(&format!("{pods}/held")).await;
    side.note("get after its last finalizer went", &answer, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_and_the_self_reviews_as_on_a_real_api_server() {
    differential("corpus-rbac", rbac).await;
}

/// What a ServiceAccount bound to one Role may do, asked as that account: requests its rules
/// grant or not (`resourceNames` among them, a list named by its field selector, a
/// subresource), and the reviews a client asks about itself (access, rules, who it is).
async fn rbac(side: Side) {
    let rules = json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["named"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"], "resourceNames": ["listed"]},
        {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"],
         "resourceNames": ["runner"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "list"]},
    ]);
    side.post(
        &side.rbac("roles"),
        &json!({"metadata": {"name": "launcher"}, "rules": rules}),
    )
    .await;
    side.post(
        &side.rbac("rolebindings"),
        &json!({"metadata": {"name": "launcher"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "launcher"},
            "subjects": [{"kind": "ServiceAccount", "name": "launcher", "namespace": side.ns}]}),
    )
    .await;
    for name in ["launcher", "runner", "other"] {
        side.post(&side.at("serviceaccounts"), &account(name)).await;
    }
    for name in ["named", "unnamed", "listed"] {
        side.post(&side.at("pods"), &pod(name)).await;
    }
    let launcher = side.as_account("launcher").await;
    let pods = side.at("pods");
    for (case, uri) in [
        ("get a Pod its resourceNames name", format!("{pods}/named")),
        (
            "get a Pod its resourceNames do not name",
            format!("{pods}/unnamed"),
        ),
        ("list Pods", pods.clone()),
        (
            "list Pods by a field selector on a name its list rule names",
            format!("{pods}?fieldSelector=metadata.name%3Dlisted"),
        ),
        (
            "list Pods by a field selector on another name",
            format!("{pods}?fieldSelector=metadata.name%3Dnamed"),
        ),
        (
            "list Jobs its rules grant",
            format!("/apis/batch/v1/namespaces/{}/jobs", side.ns),
        ),
        (
            "get a Pod in another namespace",
            "/api/v1/namespaces/default/pods/named".to_owned(),
        ),
        ("list Namespaces", "/api/v1/namespaces".to_owned()),
    ] {
        let answer = launcher.get(&uri).await;
        launcher.note(&format!("as the bound account: {case}"), &answer, &[]);
    }
    let answer = launcher.post(&pods, &pod("created")).await;
    launcher.note("as the bound account: create a Pod", &answer, &[]);
    let answer = launcher
        .delete(
            &format!("/apis/batch/v1/namespaces/{}/jobs/any", side.ns),
            None,
        )
        .await;
    launcher.note(
        "as the bound account: delete a Job, no rule grants it",
        &answer,
        &[],
    );
    let answer = side
        .post(
            &format!("{}/runner/token", side.at("serviceaccounts")),
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"expirationSeconds": 60}}),
        )
        .await;
    side.note("a TokenRequest for 60 seconds", &answer, &[]);
    for account in ["runner", "other"] {
        let answer = launcher
            .post(
                &format!("{}/{account}/token", side.at("serviceaccounts")),
                &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
            )
            .await;
        launcher.note(
            &format!("as the bound account: a TokenRequest for {account}"),
            &answer,
            &[],
        );
    }

    // SelfSubjectAccessReviews: the same rules, asked.
    let reviews = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    for (verb, resource, sub, name, ns) in [
        ("get", "pods", "", "named", side.ns.as_str()),
        ("get", "pods", "", "unnamed", side.ns.as_str()),
        ("get", "pods", "", "", side.ns.as_str()),
        ("list", "pods", "", "", side.ns.as_str()),
        (
            "create",
            "serviceaccounts",
            "token",
            "runner",
            side.ns.as_str(),
        ),
        ("create", "jobs", "", "", side.ns.as_str()),
        ("create", "pods", "", "", side.ns.as_str()),
        ("list", "jobs", "", "", "default"),
    ] {
        let group = if resource == "jobs" { "batch" } else { "" };
        let answer = launcher
            .post(
                reviews,
                &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                    "spec": {"resourceAttributes": {"verb": verb, "group": group,
                        "resource": resource, "subresource": sub, "name": name,
                        "namespace": ns}}}),
            )
            .await;
        let ns_shown = if ns == side.ns { "its namespace" } else { ns };
        launcher.note(
            &format!("as the bound account: may I {verb} {resource}/{sub} {name:?} in {ns_shown}"),
            &answer,
            &["/status/allowed"],
        );
    }

    // The rules review: its rules in its namespace (the default ClusterRoleBindings' beside
    // them), as a set; in another namespace, the defaults only.
    let rules_review = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
    for (case, ns) in [("its namespace", side.ns.as_str()), ("default", "default")] {
        let mut answer = launcher
            .post(
                rules_review,
                &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                    "spec": {"namespace": ns}}),
            )
            .await;
        for list in ["resourceRules", "nonResourceRules"] {
            if let Some(rules) = answer.body["status"][list].as_array_mut() {
                rules.sort_by_key(Value::to_string);
            }
        }
        launcher.note(
            &format!("as the bound account: the rules review in {case}"),
            &answer,
            &["/status/resourceRules", "/status/incomplete"],
        );
    }
    // Who it is: its user name and groups (the UID differs by side).
    let answer = launcher
        .post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
        )
        .await;
    let mut shown = answer.clone();
    if let Some(user) = shown.body["status"]["userInfo"].as_object_mut() {
        let name = user["username"]
            .as_str()
            .unwrap_or_default()
            .replace(&side.suffix, "<suffix>");
        user.insert("username".into(), json!(name));
        let groups: Vec<String> = user["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|g| g.replace(&side.suffix, "<suffix>"))
            .collect();
        user.insert("groups".into(), json!(groups));
    }
    launcher.note(
        "as the bound account: who am I",
        &shown,
        &["/status/userInfo/username", "/status/userInfo/groups"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_as_on_a_real_api_server_is_refused_by_the_double() {
    differential("corpus-watch", watch).await;
}

/// One watch, ended by its timeout: the real API server streams the Pod it selects; the double
/// refuses it ([`KNOWN`]).
async fn watch(side: Side) {
    let pods = side.at("pods");
    side.post(&pods, &pod("watched")).await;
    side.post(&pods, &pod("other")).await;
    let answer = side
        .watch(
            &format!("{pods}?watch=true&fieldSelector=metadata.name%3Dwatched&timeoutSeconds=1"),
            Duration::from_secs(10),
        )
        .await;
    side.note_events("watch Pods by fieldSelector metadata.name=watched", &answer);
}

/// `selector` as a query value (`%`-encoded but for what a selector's plain words use).
fn encode(selector: &str) -> String {
    selector
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
