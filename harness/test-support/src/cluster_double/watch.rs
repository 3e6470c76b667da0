//! Watches: a list asked with `watch`, streamed from the store's changes.

use super::request::Ctx;
use super::route::param;
use super::runtime::with_status;
use super::status::{Reply, status};
use super::store::{KEPT_CHANGES, Key};
use http_body_util::BodyExt;
use hyper::body::Bytes;
use hyper::{Response, StatusCode};
use serde_json::{Value, json};
use std::time::Duration;

impl Ctx<'_> {
    /// A watch: a stream of `{"type": ..., "object": ...}` lines, one per change, as the API
    /// server streams a JSON watch (apiserver `endpoints/handlers/watch.go`;
    /// <https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes>).
    /// Without `resourceVersion` (or with `0`) it starts with an `ADDED` for every object
    /// selected now; from a `resourceVersion` (a list's), with every change after it (410
    /// Gone when the double no longer holds them, [`KEPT_CHANGES`]). Then `ADDED`,
    /// `MODIFIED` and `DELETED` in the order the store changed, each object as it was then
    /// (an object that stops matching a selector is `DELETED`, one that starts is
    /// `ADDED`), until `timeoutSeconds` (the API server's default is 30 to 60 minutes; the
    /// double's is 30) or the client goes. `sendInitialEvents=true` (a watch-list) ends the
    /// initial events with a `BOOKMARK` annotated `k8s.io/initial-events-end`.
    ///
    /// A Pod's status is read from the runtime when the event is sent: its changes (a
    /// container started or ended) are no events of their own, as they would be from a
    /// kubelet's status updates.
    pub(crate) fn watch(&self, name: Option<&str>) -> Reply {
        let fields = match self.field_selector() {
            Ok(fields) => fields,
            Err(refused) => return *refused,
        };
        let since = match param(self.query, "resourceVersion").filter(|v| !v.is_empty()) {
            None | Some("0") => None,
            Some(v) => match v.parse::<u64>() {
                Ok(v) => Some(v),
                Err(_) => {
                    return status(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        &format!("invalid resource version: {v:?}"),
                        json!({}),
                    );
                }
            },
        };
        let timeout = param(self.query, "timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .filter(|t| *t > 0)
            .unwrap_or(1800);
        let initial_end = param(self.query, "sendInitialEvents") == Some("true");
        // The first events, and where in the store's changes the watch goes on from.
        let (first, mut seen_rv) = {
            let store = self.state.store();
            match since {
                None => {
                    let added: Vec<(&str, Value)> = self
                        .selected(&store, &fields, name)
                        .into_iter()
                        .map(|(_, o)| ("ADDED", o))
                        .collect();
                    (added, store.resource_version)
                }
                Some(since) => {
                    let oldest = store.changes.front().map(|c| c.resource_version);
                    if store.changes.len() >= KEPT_CHANGES
                        && oldest.is_some_and(|oldest| oldest > since + 1)
                    {
                        return status(
                            StatusCode::GONE,
                            "Expired",
                            &format!(
                                "too old resource version: {since} ({})",
                                oldest.unwrap_or_default()
                            ),
                            json!({}),
                        );
                    }
                    (Vec::new(), since)
                }
            }
        };
        let (state, route, query) = (self.state.clone(), self.route.clone(), self.query.to_vec());
        let (api_version, kind, identity) = (
            self.api_version.to_owned(),
            self.kind,
            self.identity.clone(),
        );
        let name = name.map(str::to_owned);
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
        tokio::spawn(async move {
            let ctx = Ctx {
                state: &state,
                identity: &identity,
                route: &route,
                query: &query,
                api_version: &api_version,
                kind,
            };
            let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
            let send = |event: &str, object: Value| {
                let tx = tx.clone();
                let state = state.clone();
                let event = event.to_owned();
                async move {
                    let object = with_status(&state, object).await;
                    let line = format!("{}\n", json!({"type": event, "object": object}));
                    tx.send(Bytes::from(line)).await.is_ok()
                }
            };
            for (event, object) in first {
                if !send(event, object).await {
                    return;
                }
            }
            if initial_end {
                let bookmark = json!({"apiVersion": api_version, "kind": kind,
                    "metadata": {"resourceVersion": seen_rv.to_string(),
                        "annotations": {"k8s.io/initial-events-end": "true"}}});
                if !send("BOOKMARK", bookmark).await {
                    return;
                }
            }
            loop {
                let events: Vec<(&str, Value)> = {
                    let store = state.store();
                    let matches = |key: &Key, object: &Option<Value>| {
                        object
                            .as_ref()
                            .is_some_and(|o| ctx.matches(key, o, &fields, name.as_deref()))
                    };
                    let events = store
                        .changes
                        .iter()
                        .filter(|c| c.resource_version > seen_rv)
                        .filter_map(|c| {
                            let (was, is) = (matches(&c.key, &c.before), matches(&c.key, &c.after));
                            let uid = |o: &Option<Value>| {
                                o.as_ref().map(|o| o["metadata"]["uid"].clone())
                            };
                            match (was, is, c.after.clone()) {
                                (true, true, Some(after)) if uid(&c.before) == uid(&c.after) => {
                                    Some(("MODIFIED", after))
                                }
                                (_, true, Some(after)) => Some(("ADDED", after)),
                                (true, _, after) => {
                                    // Gone (or no longer selected): the object as it was,
                                    // at the deletion's resourceVersion.
                                    let mut last = after.or(c.before.clone())?;
                                    last["metadata"]["resourceVersion"] =
                                        json!(c.resource_version.to_string());
                                    Some(("DELETED", last))
                                }
                                _ => None,
                            }
                        })
                        .collect();
                    seen_rv = store.resource_version;
                    events
                };
                for (event, object) in events {
                    if !send(event, object).await {
                        return;
                    }
                }
                if tokio::time::Instant::now() >= deadline {
                    return;
                }
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(25)) => {}
                    () = tx.closed() => return,
                }
            }
        });
        let frames = futures_util::stream::unfold(rx, |mut rx| async move {
            let bytes = rx.recv().await?;
            Some((
                Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(bytes)),
                rx,
            ))
        });
        let mut reply = Response::new(http_body_util::StreamBody::new(frames).boxed());
        reply.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        reply
    }
}
