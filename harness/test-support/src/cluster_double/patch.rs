//! PATCH bodies applied as the API server applies them: JSON Patch (RFC 6902), JSON merge
//! patch (RFC 7386), and Kubernetes' strategic merge patch (apimachinery
//! `util/strategicpatch/patch.go`) for the fields of the objects the double stores.
//!
//! The strategic merge patch is the one `kubectl apply` (client-side), `kubectl label`,
//! `annotate` and `edit` send. It is a merge patch except where the Go type declares a patch
//! strategy: lists with `patchStrategy:"merge"` are merged by their `patchMergeKey` (a Pod's
//! `containers`, `volumes`, `env`, `volumeMounts`, `ports`, `metadata.ownerReferences`,
//! ...), `finalizers` is merged as a set, and the directives `$patch` (`replace`/`delete`),
//! `$retainKeys`, `$deleteFromPrimitiveList/<field>` and `$setElementOrder/<field>` are
//! honoured (the last only as an instruction about order, which the double does not keep).
//! Every other list (a Role's `rules`, a RoleBinding's `subjects`, tolerations, ...) is
//! replaced, as those fields declare no strategy. The merge keys are looked up by field
//! name, not by the full Go type: enough for the objects the double serves.

use serde_json::{Map, Value};

/// The merge key of a list field with `patchStrategy:"merge"` (as k8s.io/api declares it),
/// by the field's name; `ports` is a container's (`containerPort`) or a Service's (`port`).
fn merge_key(field: &str, items: &[Value]) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "secrets" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "ownerReferences" => "uid",
        "conditions" => "type",
        "hostAliases" => "ip",
        "ports" => {
            if items.iter().any(|i| i.get("containerPort").is_some()) {
                "containerPort"
            } else {
                "port"
            }
        }
        _ => return None,
    })
}

/// Lists of scalars merged as a set.
fn merged_set(field: &str) -> bool {
    field == "finalizers"
}

/// RFC 7386: `patch` merged into `target`.
pub(crate) fn merge(target: &mut Value, patch: &Value) {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Some(object) = target.as_object_mut() else {
        return;
    };
    for (key, value) in patch {
        if value.is_null() {
            object.remove(key);
        } else {
            merge(object.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// A strategic merge patch applied to `target`; an error names what is not understood.
pub(crate) fn strategic(target: &mut Value, patch: &Value) -> Result<(), String> {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return Ok(());
    };
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut replaced = patch.clone();
            replaced.remove("$patch");
            *target = Value::Object(replaced);
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Null;
            return Ok(());
        }
        // `mergepatch.ErrBadArgType`-like: the error `strategicpatch` returns, the map shown
        // as Go prints it (the API server answers it 500: `interpretStrategicMergePatchError`
        // passes it on).
        Some(other) => {
            return Err(format!(
                "unknown patch type: {other} in map: {}",
                go_print(&Value::Object(patch.clone()))
            ));
        }
        None => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Some(object) = target.as_object_mut() else {
        return Ok(());
    };
    if let Some(retain) = patch.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        object.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (key, value) in patch {
        if key == "$retainKeys" || key.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let gone = value.as_array().cloned().unwrap_or_default();
            if let Some(list) = object.get_mut(field).and_then(Value::as_array_mut) {
                list.retain(|v| !gone.contains(v));
            }
            continue;
        }
        if key.starts_with('$') {
            return Err(format!("unknown directive {key}"));
        }
        if value.is_null() {
            object.remove(key);
            continue;
        }
        let slot = object.entry(key.clone()).or_insert(Value::Null);
        match (value, slot.is_array()) {
            (Value::Array(items), true) => {
                let original = slot.as_array_mut().map(std::mem::take).unwrap_or_default();
                *slot = Value::Array(merge_list(key, original, items)?);
            }
            (Value::Array(items), false) => {
                // Nothing to merge into: the patch's items without their directives.
                *slot = Value::Array(merge_list(key, Vec::new(), items)?);
            }
            (Value::Object(_), _) => {
                strategic(slot, value)?;
                if slot.is_null() {
                    object.remove(key);
                }
            }
            _ => *slot = value.clone(),
        }
    }
    Ok(())
}

/// A JSON value as Go's `fmt` prints the `interface{}` it decodes to (`map[k:v]` with the
/// keys sorted, `[a b]`, strings bare).
fn go_print(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let entries: Vec<String> = keys
                .iter()
                .map(|k| format!("{k}:{}", go_print(&map[k.as_str()])))
                .collect();
            format!("map[{}]", entries.join(" "))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(go_print).collect();
            format!("[{}]", items.join(" "))
        }
        Value::String(s) => s.clone(),
        Value::Null => "<nil>".to_owned(),
        other => other.to_string(),
    }
}

fn merge_list(
    field: &str,
    mut original: Vec<Value>,
    patch: &[Value],
) -> Result<Vec<Value>, String> {
    if merged_set(field) {
        for item in patch {
            if !original.contains(item) {
                original.push(item.clone());
            }
        }
        return Ok(original);
    }
    if patch
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        return Ok(patch
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .cloned()
            .collect());
    }
    let Some(key) = merge_key(field, patch) else {
        return Ok(patch.to_vec());
    };
    for item in patch {
        let id = item.get(key).cloned();
        let at = original
            .iter()
            .position(|o| id.is_some() && o.get(key) == id.as_ref());
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (at, delete) {
            (Some(at), true) => {
                original.remove(at);
            }
            (None, true) => {}
            (Some(at), false) => strategic(&mut original[at], item)?,
            (None, false) => {
                let mut added = Value::Null;
                strategic(&mut added, item)?;
                original.push(added);
            }
        }
    }
    Ok(original)
}

/// RFC 6902 applied to `target` (all or nothing: `target` is unchanged on an error).
pub(crate) fn json_patch(target: &mut Value, operations: &Value) -> Result<(), String> {
    let operations = operations
        .as_array()
        .ok_or("a JSON Patch is a list of operations")?;
    let mut doc = target.clone();
    for op in operations {
        let path = op["path"].as_str().ok_or("an operation without a path")?;
        match op["op"].as_str().unwrap_or_default() {
            "add" => add(&mut doc, path, op["value"].clone())?,
            "remove" => {
                remove(&mut doc, path)?;
            }
            "replace" => {
                remove(&mut doc, path)?;
                add(&mut doc, path, op["value"].clone())?;
            }
            "move" => {
                let from = op["from"].as_str().ok_or("move without from")?;
                let value = remove(&mut doc, from)?;
                add(&mut doc, path, value)?;
            }
            "copy" => {
                let from = op["from"].as_str().ok_or("copy without from")?;
                let value = doc.pointer(from).cloned().ok_or(format!("no {from}"))?;
                add(&mut doc, path, value)?;
            }
            "test" => {
                if doc.pointer(path) != Some(&op["value"]) {
                    return Err(format!("test failed at {path}"));
                }
            }
            other => return Err(format!("unknown operation {other:?}")),
        }
    }
    *target = doc;
    Ok(())
}

fn split(path: &str) -> Result<(String, String), String> {
    let (parent, last) = path.rsplit_once('/').ok_or(format!("bad path {path:?}"))?;
    Ok((
        parent.to_owned(),
        last.replace("~1", "/").replace("~0", "~"),
    ))
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = split(path)?;
    match doc.pointer_mut(&parent) {
        Some(Value::Object(map)) => {
            map.insert(last, value);
            Ok(())
        }
        Some(Value::Array(list)) => {
            let at = if last == "-" {
                list.len()
            } else {
                last.parse::<usize>()
                    .map_err(|_| format!("bad index {last}"))?
            };
            if at > list.len() {
                return Err(format!("index {at} out of bounds"));
            }
            list.insert(at, value);
            Ok(())
        }
        _ => Err(format!("no {parent:?} to add to")),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, last) = split(path)?;
    match doc.pointer_mut(&parent) {
        Some(Value::Object(map)) => map.remove(&last).ok_or(format!("no {path:?} to remove")),
        Some(Value::Array(list)) => {
            let at = last
                .parse::<usize>()
                .map_err(|_| format!("bad index {last}"))?;
            if at >= list.len() {
                return Err(format!("index {at} out of bounds"));
            }
            Ok(list.remove(at))
        }
        _ => Err(format!("no {path:?} to remove")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_strategic_patch_merges_containers_by_name_and_replaces_rules() {
        let mut pod = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
            "spec": {"containers": [{"name": "one", "image": "i1"}, {"name": "two", "image": "i2"}]}});
        strategic(
            &mut pod,
            &json!({"metadata": {"labels": {"b": null, "c": "3"}, "finalizers": ["y"]},
                "spec": {"$setElementOrder/containers": [{"name": "one"}, {"name": "two"}],
                    "containers": [{"name": "two", "image": "i3"}, {"name": "one", "$patch": "delete"}]}}),
        )
        .unwrap();
        assert_eq!(
            pod,
            json!({"metadata": {"labels": {"a": "1", "c": "3"}, "finalizers": ["x", "y"]},
                "spec": {"containers": [{"name": "two", "image": "i3"}]}})
        );
        let mut role = json!({"rules": [{"verbs": ["get"]}, {"verbs": ["list"]}]});
        strategic(&mut role, &json!({"rules": [{"verbs": ["watch"]}]})).unwrap();
        assert_eq!(role, json!({"rules": [{"verbs": ["watch"]}]}));
    }

    #[test]
    fn a_json_patch_is_applied_whole_or_not_at_all() {
        let mut doc = json!({"metadata": {"labels": {"a": "1"}}, "items": [1, 2]});
        json_patch(
            &mut doc,
            &json!([{"op": "add", "path": "/metadata/labels/b~1c", "value": "2"},
                {"op": "replace", "path": "/items/0", "value": 9},
                {"op": "add", "path": "/items/-", "value": 3}]),
        )
        .unwrap();
        assert_eq!(
            doc,
            json!({"metadata": {"labels": {"a": "1", "b/c": "2"}}, "items": [9, 2, 3]})
        );
        let before = doc.clone();
        assert!(
            json_patch(
                &mut doc,
                &json!([{"op": "remove", "path": "/metadata/labels/a"},
                {"op": "test", "path": "/items/0", "value": 1}])
            )
            .is_err()
        );
        assert_eq!(doc, before);
    }
}
