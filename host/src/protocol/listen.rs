//! Change notifications: 2026's `subscriptions/listen` (a stream of tagged notifications, opened by a
//! request, filtered by what it asked for) and the untagged `list_changed` / `resources/updated`
//! messages 2025 sessions receive.

use serde_json::{Map, Value, json};

use super::era::META_SERVER_INFO;
use super::jsonrpc::{self, RpcError, response};
use super::resources::{normal_uri, subscribable};
use super::{Answer, Protocol, Request};
use crate::host::Change;

const META_SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

/// The list-changed filters a listen request may ask for, with the notification each one brings.
const LISTS: [(&str, &str); 3] = [
    ("toolsListChanged", "notifications/tools/list_changed"),
    ("promptsListChanged", "notifications/prompts/list_changed"),
    (
        "resourcesListChanged",
        "notifications/resources/list_changed",
    ),
];

/// `subscriptions/listen`: the notification kinds accepted — the list changes asked for, the
/// asked resource subscriptions that name a resource the caller can read, and the asked tasks
/// that exist and are the caller's (tasks extension: `taskIds`).
pub(crate) async fn listen(protocol: &Protocol, req: &Request<'_>) -> Result<Answer, RpcError> {
    let asked = req.params.get("notifications");
    let mut accepted = Map::new();
    for (filter, _) in LISTS {
        if asked.and_then(|n| n.get(filter)).and_then(Value::as_bool) == Some(true) {
            accepted.insert(filter.into(), json!(true));
        }
    }
    if let Some(uris) = asked
        .and_then(|n| n.get("resourceSubscriptions"))
        .and_then(Value::as_array)
    {
        // Accepted in normal form (what updates are matched by), once; a URI without one is not.
        let mut seen = std::collections::HashSet::new();
        let mut known: Vec<Value> = Vec::new();
        for uri in uris
            .iter()
            .filter_map(Value::as_str)
            .filter_map(|raw| normal_uri(protocol, raw).ok())
        {
            if !seen.contains(&*uri) && subscribable(protocol, req, &uri) {
                known.push(json!(uri));
                seen.insert(uri);
            }
        }
        accepted.insert("resourceSubscriptions".into(), Value::Array(known));
    }
    if let Some(ids) = asked.and_then(|n| n.get("taskIds")) {
        let ids = ids.as_array().map_or(&[][..], Vec::as_slice);
        let followed = super::tasks::followable(protocol, req, ids).await?;
        accepted.insert("taskIds".into(), Value::Array(followed));
    }
    Ok(Answer::Listen(Value::Object(accepted)))
}

/// `params` tagged with a listen stream's subscription id, when there is one.
fn tagged(mut params: Map<String, Value>, subscription: Option<&Value>) -> Value {
    if let Some(id) = subscription {
        params.insert("_meta".into(), json!({ META_SUBSCRIPTION: id }));
    }
    Value::Object(params)
}

impl Protocol {
    /// The `notifications/subscriptions/acknowledged` message that opens a listen stream.
    pub fn listen_ack(id: &Value, accepted: &Value) -> Value {
        jsonrpc::notification(
            "notifications/subscriptions/acknowledged",
            json!({ "notifications": accepted, "_meta": { META_SUBSCRIPTION: id } }),
        )
    }

    /// The notifications `change` brings to a listen stream with filter `accepted` (tagged with its
    /// `subscription`), or to a 2025 session (`accepted: None`, untagged; `subscribed` says which
    /// resource URIs it subscribed to).
    pub fn notifications(
        change: &Change,
        subscription: Option<&Value>,
        accepted: Option<&Value>,
        subscribed: impl Fn(&str) -> bool,
    ) -> Vec<Value> {
        match change {
            Change::Lists {
                tools,
                resources,
                prompts,
            } => LISTS
                .iter()
                .zip([tools, prompts, resources])
                .filter(|((filter, _), changed)| {
                    **changed && accepted.is_none_or(|a| a.get(*filter) == Some(&json!(true)))
                })
                .map(|((_, method), _)| {
                    let params = tagged(Map::new(), subscription);
                    if subscription.is_some() {
                        jsonrpc::notification(method, params)
                    } else {
                        json!({ "jsonrpc": "2.0", "method": method })
                    }
                })
                .collect(),
            Change::ResourceUpdated(uri) => {
                // Subscriptions are kept in normal form: so is the URI matched.
                let normal = crate::registry::uri::normalize(uri)
                    .unwrap_or(std::borrow::Cow::Borrowed(&**uri));
                let wanted = match accepted {
                    Some(a) => a
                        .get("resourceSubscriptions")
                        .and_then(Value::as_array)
                        .is_some_and(|uris| uris.iter().any(|u| u == &*normal)),
                    None => subscribed(&normal),
                };
                if !wanted {
                    return Vec::new();
                }
                let mut params = Map::new();
                params.insert("uri".into(), json!(&**uri));
                vec![jsonrpc::notification(
                    "notifications/resources/updated",
                    tagged(params, subscription),
                )]
            }
        }
    }

    /// The `notifications/tasks` an event brings to a listen stream with filter `accepted`
    /// (tagged with its `subscription`), if it follows the task.
    pub fn task_notification(
        event: &crate::store::Event,
        subscription: &Value,
        accepted: &Value,
    ) -> Option<Value> {
        let crate::store::Event::Task { id, view, .. } = event else {
            return None;
        };
        let followed = accepted
            .get("taskIds")
            .and_then(Value::as_array)
            .is_some_and(|ids| ids.iter().any(|i| i == id.as_str()));
        let Value::Object(params) = view.clone() else {
            return None;
        };
        followed.then(|| {
            jsonrpc::notification("notifications/tasks", tagged(params, Some(subscription)))
        })
    }

    /// The result that ends a listen stream gracefully.
    pub fn listen_end(&self, id: &Value) -> Value {
        response(
            id,
            json!({
                "resultType": "complete",
                "_meta": { META_SUBSCRIPTION: id, META_SERVER_INFO: &*self.server_info }
            }),
        )
    }
}
