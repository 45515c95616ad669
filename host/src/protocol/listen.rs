//! Change notifications: 2026's `subscriptions/listen` (a stream of tagged notifications, opened by a
//! request) and the `notifications/tools/list_changed` messages both eras receive.

use serde_json::{Value, json};

use super::era::META_SERVER_INFO;
use super::jsonrpc::{self, RpcError, response};
use super::{Answer, Protocol, Request};

const META_SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

/// `subscriptions/listen`: the notification kinds accepted (only tool-list changes exist here).
pub(crate) fn listen(req: &Request<'_>) -> Result<Answer, RpcError> {
    let wants_tools = req
        .params
        .get("notifications")
        .and_then(|n| n.get("toolsListChanged"))
        .and_then(Value::as_bool)
        == Some(true);
    let accepted = if wants_tools {
        json!({ "toolsListChanged": true })
    } else {
        json!({})
    };
    Ok(Answer::Listen(accepted))
}

impl Protocol {
    /// The `notifications/subscriptions/acknowledged` message that opens a listen stream.
    pub fn listen_ack(id: &Value, accepted: &Value) -> Value {
        jsonrpc::notification(
            "notifications/subscriptions/acknowledged",
            json!({ "notifications": accepted, "_meta": { META_SUBSCRIPTION: id } }),
        )
    }

    /// A `tools/list_changed` notification for a listen stream (tagged) or a legacy session
    /// (untagged).
    pub fn tools_changed(subscription: Option<&Value>) -> Value {
        match subscription {
            Some(id) => jsonrpc::notification(
                "notifications/tools/list_changed",
                json!({ "_meta": { META_SUBSCRIPTION: id } }),
            ),
            None => json!({ "jsonrpc": "2.0", "method": "notifications/tools/list_changed" }),
        }
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
