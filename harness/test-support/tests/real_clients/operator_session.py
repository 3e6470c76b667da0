"""An operator's session against a Kubernetes API server through the official Python client
(PyPI `kubernetes`; Debian's python3-kubernetes), run by `real_clients.rs` against the
cluster double: python3 operator_session.py KUBECONFIG CONTEXT NAMESPACE.

Discovery of the server's version, namespaces, a ServiceAccount, Role and RoleBinding
created, read and deleted, SelfSubjectAccessReviews as the kubeconfig's user and as a
ServiceAccount's token (a TokenRequest), and a watch of Pods (the ServiceAccount's Role
grants watch but not list: the watch is allowed, the list refused). Prints one line per
step; any failure raises (a non-zero exit).
"""

import sys
import threading
import time

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

kubeconfig, context, ns = sys.argv[1], sys.argv[2], sys.argv[3]
admin = config.new_client_from_config(config_file=kubeconfig, context=context)
core = client.CoreV1Api(admin)
rbac = client.RbacAuthorizationV1Api(admin)
authz = client.AuthorizationV1Api(admin)


def step(message):
    print(message, flush=True)


version = client.VersionApi(admin).get_code()
step(f"version {version.git_version}")

names = [n.metadata.name for n in core.list_namespace().items]
assert "default" in names and "kube-system" in names, names
step(f"namespaces {' '.join(sorted(names))}")

core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
accounts = [a.metadata.name for a in core.list_namespaced_service_account(ns).items]
assert accounts == ["default"], accounts
step(f"namespace {ns} created with its default ServiceAccount")

core.create_namespaced_service_account(
    ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="watcher"))
)
rbac.create_namespaced_role(
    ns,
    client.V1Role(
        metadata=client.V1ObjectMeta(name="watcher"),
        rules=[
            client.V1PolicyRule(
                api_groups=[""], resources=["pods"], verbs=["get", "watch"]
            )
        ],
    ),
)
rbac.create_namespaced_role_binding(
    ns,
    client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name="watcher"),
        subjects=[client.V1Subject(kind="ServiceAccount", name="watcher", namespace=ns)]
        if hasattr(client, "V1Subject")
        else [client.RbacV1Subject(kind="ServiceAccount", name="watcher", namespace=ns)],
        role_ref=client.V1RoleRef(
            api_group="rbac.authorization.k8s.io", kind="Role", name="watcher"
        ),
    ),
)
role = rbac.read_namespaced_role("watcher", ns)
assert role.rules[0].verbs == ["get", "watch"], role.rules
assert role.rules[0].api_groups == [""], role.rules
binding = rbac.read_namespaced_role_binding("watcher", ns)
assert binding.subjects[0].name == "watcher" and binding.role_ref.name == "watcher"
step("ServiceAccount, Role and RoleBinding created and read back")


def can_i(authorization, verb, resource):
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                namespace=ns, verb=verb, resource=resource
            )
        )
    )
    return authorization.create_self_subject_access_review(review).status.allowed


assert can_i(authz, "create", "pods")
step("admin may create pods")

token = core.create_namespaced_service_account_token(
    "watcher", ns, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
    if hasattr(client, "AuthenticationV1TokenRequest")
    else client.V1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[])),
).status.token
configuration = client.Configuration()
configuration.host = admin.configuration.host
configuration.ssl_ca_cert = admin.configuration.ssl_ca_cert
configuration.api_key = {"authorization": "Bearer " + token}
watcher = client.ApiClient(configuration)
watcher_core = client.CoreV1Api(watcher)
assert can_i(client.AuthorizationV1Api(watcher), "watch", "pods")
assert not can_i(client.AuthorizationV1Api(watcher), "list", "pods")
assert not can_i(client.AuthorizationV1Api(watcher), "create", "pods")
try:
    watcher_core.list_namespaced_pod(ns)
    raise AssertionError("the watcher listed pods")
except ApiException as e:
    assert e.status == 403, e
step("the ServiceAccount's token may watch pods, not list or create them (403)")

events = []
started = threading.Event()


def watch_pods():
    w = watch.Watch()
    started.set()
    for event in w.stream(watcher_core.list_namespaced_pod, ns, timeout_seconds=20):
        events.append((event["type"], event["object"].metadata.name))
        if event["type"] == "DELETED":
            w.stop()


thread = threading.Thread(target=watch_pods)
thread.start()
started.wait()
pod = client.V1Pod(
    metadata=client.V1ObjectMeta(name="watched", labels={"app": "watched"}),
    spec=client.V1PodSpec(
        containers=[client.V1Container(name="main", image="debian:bookworm")]
    ),
)
time.sleep(1)
core.create_namespaced_pod(ns, pod)
time.sleep(1)
core.patch_namespaced_pod("watched", ns, {"metadata": {"labels": {"step": "two"}}})
time.sleep(1)
core.delete_namespaced_pod("watched", ns)
thread.join(30)
assert not thread.is_alive(), f"the watch did not end: {events}"
kinds = [t for t, name in events if name == "watched"]
assert kinds[0] == "ADDED" and "MODIFIED" in kinds and kinds[-1] == "DELETED", events
step(f"watch events {' '.join(kinds)}")

rbac.delete_namespaced_role_binding("watcher", ns)
rbac.delete_namespaced_role("watcher", ns)
core.delete_namespaced_service_account("watcher", ns)
try:
    rbac.read_namespaced_role("watcher", ns)
    raise AssertionError("the Role is still there")
except ApiException as e:
    assert e.status == 404, e
core.delete_namespace(ns)
step(f"deleted; namespace {ns} deleted")
