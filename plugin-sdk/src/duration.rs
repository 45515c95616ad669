//! [`Seconds`]: a duration that is a plain number of seconds in JSON.

use std::borrow::Cow;
use std::ops::Deref;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer, de::Error as _};

/// A [`Duration`] that is a number of seconds (fractions allowed) in JSON and in the JSON Schema
/// (`{"type": "number", "minimum": 0}`), for tool arguments and results.
///
/// `Duration` itself serializes as `{"secs": 90, "nanos": 0}`, an object models rarely fill in
/// right; `Seconds` reads `90` or `1.5` and writes the same. A negative, infinite or too large
/// number is refused with an error naming the value.
///
/// ```
/// use std::time::Duration;
/// use mcp_plugin_sdk::{Seconds, json, tool};
///
/// /// Wait, then say so.
/// ///
/// /// # Arguments
/// /// * `delay` - How long to wait, in seconds.
/// #[tool]
/// pub fn wait(delay: Seconds) -> String {
///     let delay: Duration = delay.into();
///     format!("waited {} ms", delay.as_millis())
/// }
///
/// # fn main() {
/// let delay: Seconds = serde_json::from_value(json!(1.5)).unwrap();
/// assert_eq!(*delay, Duration::from_millis(1500));
/// assert_eq!(serde_json::to_value(Seconds::from(Duration::from_secs(90))).unwrap(), json!(90.0));
/// assert!(serde_json::from_value::<Seconds>(json!(-1)).is_err());
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Seconds(pub Duration);

impl From<Duration> for Seconds {
    fn from(duration: Duration) -> Self {
        Seconds(duration)
    }
}

impl From<Seconds> for Duration {
    fn from(seconds: Seconds) -> Self {
        seconds.0
    }
}

impl Deref for Seconds {
    type Target = Duration;

    fn deref(&self) -> &Duration {
        &self.0
    }
}

impl Serialize for Seconds {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.0.as_secs_f64())
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let secs = f64::deserialize(deserializer)?;
        Duration::try_from_secs_f64(secs).map(Seconds).map_err(|_| {
            D::Error::custom(format!(
                "{secs} is not a duration: expected a number of seconds, 0 or more"
            ))
        })
    }
}

impl schemars::JsonSchema for Seconds {
    fn schema_name() -> Cow<'static, str> {
        "Seconds".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "number", "minimum": 0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(schemars::JsonSchema, Serialize)]
    #[allow(dead_code)]
    struct Timed {
        /// How long it took.
        elapsed: Seconds,
    }

    #[test]
    fn a_duration_is_a_number_of_seconds_in_the_schema_and_in_json() {
        let schema = crate::schema::output_schema::<Timed>().unwrap();
        let elapsed = &schema["properties"]["elapsed"];
        assert_eq!(elapsed["type"], "number", "{schema}");
        assert_eq!(elapsed["minimum"], 0);
        assert_eq!(elapsed["description"], "How long it took.");
        let timed = Timed {
            elapsed: Duration::from_millis(250).into(),
        };
        assert_eq!(
            serde_json::to_value(&timed).unwrap(),
            json!({"elapsed": 0.25})
        );
        let e = serde_json::from_value::<Seconds>(json!(-2)).unwrap_err();
        assert!(e.to_string().contains("-2 is not a duration"), "{e}");
        assert_eq!(
            serde_json::from_value::<Seconds>(json!(3)).unwrap(),
            Seconds(Duration::from_secs(3))
        );
    }
}
