//! Watches: a list asked with `watch`, streamed from the store's changes.

use super::request::Ctx;
use super::route::param;
use super::runtime::with_status;
use super::status::{Reply, unknown_status};
use super::store::Key;
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
    /// selected now; from a `resourceVersion` (a list's), with every change after it (an
    /// `ERROR` event, 410 `Expired`, when the watch cache no longer holds them: the store's
    /// `History` of the resource, or [`KEPT_CHANGES`]). Then `ADDED`, `MODIFIED` and
    /// `DELETED` in the order the store changed, each object as it was then (an object that
    /// stops matching a selector is `DELETED`, one that starts is `ADDED`), until
    /// `timeoutSeconds` (the API server's default is 30 to 60 minutes; the double's is 30) or
    /// the client goes. With `allowWatchBookmarks`, a `BOOKMARK` every minute and 2 s before
    /// the timeout; `sendInitialEvents=true` (a watch-list) starts with the state now and,
    /// with bookmarks, ends it with a `BOOKMARK` annotated `k8s.io/initial-events-end`.
    ///
    /// [`KEPT_CHANGES`]: super::store::KEPT_CHANGES
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
                    // The cacher's `Watch` returns `ParseResourceVersion`'s error as it is
                    // (apiserver `pkg/storage/cacher/cacher.go`; `storage.NewInvalidError` in
                    // `pkg/storage/api_object_versioner.go`), no API status: the handler
                    // answers it 500 with no reason (`ErrorToAPIStatus`,
                    // `pkg/endpoints/handlers/responsewriters/status.go`).
                    return unknown_status(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &format!(
                            "resourceVersion: Invalid value: {}: strconv.ParseUint: parsing {}: invalid syntax",
                            json!(v),
                            json!(v)
                        ),
                    );
                }
            },
        };
        let timeout = param(self.query, "timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .filter(|t| *t > 0)
            .unwrap_or(1800);
        let flag =
            |key: &str| param(self.query, key).map(|v| v == "1" || v.eq_ignore_ascii_case("true"));
        let bookmarks = flag("allowWatchBookmarks").unwrap_or(false);
        // `sendInitialEvents` (a watch-list): the state now whatever the version, then (with
        // bookmarks) a `BOOKMARK` annotated `k8s.io/initial-events-end`; `false`: from now
        // on, no state (`getAllEventsSinceLocked` in `pkg/storage/cacher/watch_cache.go`,
        // `setInitialEventsEndBookmarkIfRequested` in `cacher.go`: only when the watcher
        // allows bookmarks).
        let initial = flag("sendInitialEvents");
        let initial_end = initial == Some(true) && bookmarks;
        // The first events, and where in the store's changes the watch goes on from; or the
        // one ERROR event of a version too old.
        let (first, mut seen_rv, expired) = {
            let store = self.state.store();
            match (since, initial) {
                (_, Some(true)) | (None, None) => {
                    let added: Vec<(&str, Value)> = self
                        .selected(&store, &fields, name)
                        .into_iter()
                        .map(|(_, o)| ("ADDED", o))
                        .collect();
                    (added, store.resource_version, None)
                }
                (None, Some(false)) => (Vec::new(), store.resource_version, None),
                (Some(since), _) => match store.too_old(&self.route.key(), since) {
                    // The cacher answers a version it no longer holds with an ERROR event
                    // once the watch is accepted ("To match the uncached watch
                    // implementation, ... must fail with a watch event of type ERROR":
                    // `Cacher.Watch`), `NewResourceExpired` (410 `Expired`).
                    Some(oldest) => {
                        let status = json!({"kind": "Status", "apiVersion": "v1",
                            "metadata": {}, "status": "Failure",
                            "message": format!("too old resource version: {since} ({oldest})"),
                            "reason": "Expired", "code": 410});
                        (Vec::new(), since, Some(status))
                    }
                    None => (Vec::new(), since, None),
                },
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
                    // A bookmark is a version only, no object to read a status for.
                    let object = if event == "BOOKMARK" {
                        object
                    } else {
                        with_status(&state, object).await
                    };
                    let line = format!("{}\n", json!({"type": event, "object": object}));
                    tx.send(Bytes::from(line)).await.is_ok()
                }
            };
            if let Some(status) = expired {
                let line = format!("{}\n", json!({"type": "ERROR", "object": status}));
                let _ = tx.send(Bytes::from(line)).await;
                return;
            }
            for (event, object) in first {
                if !send(event, object).await {
                    return;
                }
            }
            // Bookmarks (`allowWatchBookmarks`): every minute, and 2 s before the watch's
            // timeout (`cacheWatcher.nextBookmarkTime` in
            // `pkg/storage/cacher/cache_watcher.go`), none once that time has passed.
            let now = tokio::time::Instant::now();
            let next_bookmark = |now: tokio::time::Instant| {
                let at = (now + Duration::from_secs(60))
                    .min(deadline.checked_sub(Duration::from_secs(2)).unwrap_or(now));
                (bookmarks && at > now).then_some(at)
            };
            let mut bookmark_at = next_bookmark(now);
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
                let now = tokio::time::Instant::now();
                if now >= deadline {
                    return;
                }
                if bookmark_at.is_some_and(|at| now >= at) {
                    let bookmark = json!({"apiVersion": api_version, "kind": kind,
                        "metadata": {"resourceVersion": seen_rv.to_string()}});
                    if !send("BOOKMARK", bookmark).await {
                        return;
                    }
                    bookmark_at = next_bookmark(now);
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
