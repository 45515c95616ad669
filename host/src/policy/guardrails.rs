//! Guardrails on results: the configured actions per detector, merged for one call (the agent's
//! level over the source's over the global one; per tool over every tool; a detector's key over
//! its group's), and the pass over a `CallToolResult` that finds, counts and redacts — the text
//! content and `structuredContent`, walked as JSON so a redaction keeps it valid. What the call
//! path does with the findings (an annotation, an error result, the audit log, a metric) is the
//! `exec` stage's. A configuration without guardrails compiles to nothing: no call scans.

use std::collections::HashMap;

use serde_json::Value;

use super::detect::{DETECTORS, Group, RESULTS};
use crate::config::{GuardAction, Guardrails as Settings};

/// An action (or none) per detector, in [`DETECTORS`]' order.
pub type Plan = Vec<Option<GuardAction>>;

/// The actions of one level of the configuration.
#[derive(Debug, Default)]
struct Level {
    every: Plan,
    tools: HashMap<String, Plan>,
    /// The result filters' actions (`plugin:<plugin>/<filter>` keys), for every tool.
    every_filter: Vec<(String, GuardAction)>,
    /// The same per tool.
    tool_filters: HashMap<String, Vec<(String, GuardAction)>>,
}

impl Level {
    fn of(settings: &Settings) -> Level {
        Level {
            every: plan_of(&settings.detect),
            tools: settings
                .tools
                .iter()
                .map(|(tool, map)| (tool.clone(), plan_of(map)))
                .collect(),
            every_filter: filters_of(&settings.detect),
            tool_filters: settings
                .tools
                .iter()
                .map(|(tool, map)| (tool.clone(), filters_of(map)))
                .filter(|(_, f)| !f.is_empty())
                .collect(),
        }
    }

    /// Lay this level's filter actions for `tool` over `filters`.
    fn filters_over(&self, tool: &str, filters: &mut Vec<(String, GuardAction)>) {
        let own = self.tool_filters.get(tool).into_iter().flatten();
        for (key, action) in self.every_filter.iter().chain(own) {
            match filters.iter_mut().find(|(k, _)| k == key) {
                Some(slot) => slot.1 = *action,
                None => filters.push((key.clone(), *action)),
            }
        }
    }

    /// Lay this level's actions for `tool` over `plan`.
    fn over(&self, tool: &str, plan: &mut Plan) {
        lay(&self.every, plan);
        if let Some(own) = self.tools.get(tool) {
            lay(own, plan);
        }
    }
}

/// A level's map (detector or group → action) as a plan: groups first, a detector's own key
/// over its group's.
fn plan_of(map: &std::collections::BTreeMap<String, GuardAction>) -> Plan {
    let mut plan = vec![None; DETECTORS.len()];
    for group in Group::ALL {
        if let Some(action) = map.get(group.name()) {
            for (slot, d) in plan.iter_mut().zip(DETECTORS) {
                if d.group == group {
                    *slot = Some(*action);
                }
            }
        }
    }
    for (slot, d) in plan.iter_mut().zip(DETECTORS) {
        if let Some(action) = map.get(d.name) {
            *slot = Some(*action);
        }
    }
    plan
}

/// A level's map's result filters (`plugin:<plugin>/<filter>` keys) with their actions.
fn filters_of(map: &std::collections::BTreeMap<String, GuardAction>) -> Vec<(String, GuardAction)> {
    map.iter()
        .filter(|(k, _)| crate::config::filter_key(k).is_some())
        .map(|(k, a)| (k.clone(), *a))
        .collect()
}

fn lay(upper: &Plan, plan: &mut Plan) {
    for (slot, action) in plan.iter_mut().zip(upper) {
        if action.is_some() {
            *slot = *action;
        }
    }
}

/// The guardrails of one configuration, compiled.
#[derive(Debug, Default)]
pub struct Guardrails {
    global: Level,
    sources: HashMap<String, Level>,
    agents: HashMap<String, Level>,
    /// Whether any level sets anything.
    any: bool,
}

/// Who a call is, as the guardrails pick their level.
#[derive(Debug, Clone, Copy)]
pub struct CallSite<'a> {
    /// The tool as clients call it.
    pub tool: &'a str,
    /// The source's own name for it.
    pub source_tool: &'a str,
    /// The plugin or upstream serving it.
    pub source: &'a str,
    /// The agent whose view applies.
    pub agent: Option<&'a str>,
}

impl Guardrails {
    /// The global settings, each source's (`plugins.<name>.guardrails`) and each agent's.
    pub fn compile<'a>(
        global: &Settings,
        sources: impl IntoIterator<Item = (&'a String, &'a Settings)>,
        agents: impl IntoIterator<Item = (&'a String, &'a Settings)>,
    ) -> Guardrails {
        let keep =
            |(name, s): (&String, &Settings)| (!s.is_empty()).then(|| (name.clone(), Level::of(s)));
        let sources: HashMap<_, _> = sources.into_iter().filter_map(keep).collect();
        let agents: HashMap<_, _> = agents.into_iter().filter_map(keep).collect();
        let any = !global.is_empty() || !sources.is_empty() || !agents.is_empty();
        Guardrails {
            global: Level::of(global),
            sources,
            agents,
            any,
        }
    }

    /// Whether no guardrail is configured anywhere.
    pub fn is_empty(&self) -> bool {
        !self.any
    }

    /// The actions for a call at `site`; `None` when no detector runs on it.
    pub fn plan(&self, site: CallSite<'_>) -> Option<Plan> {
        if !self.any {
            return None;
        }
        let mut plan = vec![None; DETECTORS.len()];
        self.global.over(site.tool, &mut plan);
        if let Some(level) = self.sources.get(site.source) {
            level.over(site.source_tool, &mut plan);
        }
        if let Some(level) = site.agent.and_then(|a| self.agents.get(a)) {
            level.over(site.tool, &mut plan);
        }
        for slot in &mut plan {
            if *slot == Some(GuardAction::Off) {
                *slot = None;
            }
        }
        plan.iter().any(Option::is_some).then_some(plan)
    }

    /// The result filters (`plugin:<plugin>/<filter>`) that run on a call at `site`, with their
    /// actions, in the order the configuration names them (none: empty, nothing allocated).
    pub fn filters(&self, site: CallSite<'_>) -> Vec<(String, GuardAction)> {
        if !self.any {
            return Vec::new();
        }
        let mut filters = Vec::new();
        self.global.filters_over(site.tool, &mut filters);
        if let Some(level) = self.sources.get(site.source) {
            level.filters_over(site.source_tool, &mut filters);
        }
        if let Some(level) = site.agent.and_then(|a| self.agents.get(a)) {
            level.filters_over(site.tool, &mut filters);
        }
        filters.retain(|(_, action)| *action != GuardAction::Off);
        filters
    }
}

/// What one detector found in a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The detector's index in [`DETECTORS`].
    pub detector: usize,
    /// How many times.
    pub count: u32,
    /// What was done (`None`: found for the call policy only, nothing done).
    pub action: Option<GuardAction>,
}

impl Finding {
    /// The detector's name.
    pub fn name(&self) -> &'static str {
        DETECTORS[self.detector].name
    }

    /// The detector's group's name.
    pub fn group(&self) -> &'static str {
        DETECTORS[self.detector].group.name()
    }
}

/// What a result's scan found, per detector with its action.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Findings(pub Vec<Finding>);

impl Findings {
    /// The first finding whose action is `block`, if any.
    pub fn blocking(&self) -> Option<&Finding> {
        self.0.iter().find(|f| f.action == Some(GuardAction::Block))
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn add(&mut self, detector: usize, count: u32, action: Option<GuardAction>) {
        match self.0.iter_mut().find(|f| f.detector == detector) {
            Some(f) => f.count += count,
            None => self.0.push(Finding {
                detector,
                count,
                action,
            }),
        }
    }
}

/// Scan `result` (a `CallToolResult`) with the detectors `plan` gives an action (and, with
/// `all`, every other one, for the call policy's `result.findings`); redact in place what a
/// `redact` action found. Returns what was found, and whether the result changed.
pub fn scan(result: &mut Value, plan: &Plan, all: bool) -> (Findings, bool) {
    let mut scan = Scan {
        plan,
        all,
        findings: Findings::default(),
        changed: false,
    };
    each_text(result, &mut |text| scan.text(text));
    scan.findings.0.sort_by_key(|f| f.detector);
    (scan.findings, scan.changed)
}

/// Call `f` on every text string of `result` (a `CallToolResult`): its content items' text
/// members (a nested `resource`'s too; not their kind, media type or binary payloads) and every
/// string of its `structuredContent`.
pub fn each_text(result: &mut Value, f: &mut dyn FnMut(&mut String)) {
    if let Some(Value::Array(items)) = result.get_mut("content") {
        for item in items {
            content_texts(item, f);
        }
    }
    if let Some(structured) = result.get_mut("structuredContent") {
        value_texts(structured, f);
    }
}

struct Scan<'p> {
    plan: &'p Plan,
    all: bool,
    findings: Findings,
    changed: bool,
}

/// The members of a content item that are not text for the model: its kind, its media type and
/// binary payloads (base64, which would read as high-entropy strings).
const NOT_TEXT: &[&str] = &["type", "mimeType", "data", "blob", "_meta", "annotations"];

/// One content item's text members (a nested `resource`'s too).
fn content_texts(item: &mut Value, f: &mut dyn FnMut(&mut String)) {
    let Value::Object(members) = item else {
        return;
    };
    for (key, member) in members.iter_mut() {
        match member {
            _ if NOT_TEXT.contains(&key.as_str()) => {}
            Value::String(text) => f(text),
            Value::Object(_) => content_texts(member, f),
            _ => {}
        }
    }
}

/// Every string in `value`.
fn value_texts(value: &mut Value, f: &mut dyn FnMut(&mut String)) {
    match value {
        Value::String(text) => f(text),
        Value::Array(items) => items.iter_mut().for_each(|v| value_texts(v, f)),
        Value::Object(members) => members.values_mut().for_each(|v| value_texts(v, f)),
        _ => {}
    }
}

/// A result filter's matches, compiled for one pass over each string (the longest match wins
/// where two overlap): `Ok(None)` when there is nothing to find, `Err` when the set does not
/// build.
pub fn filter_set(
    matches: &[String],
) -> Result<Option<aho_corasick::AhoCorasick>, aho_corasick::BuildError> {
    let matches: Vec<&String> = matches.iter().filter(|m| !m.is_empty()).collect();
    if matches.is_empty() {
        return Ok(None);
    }
    aho_corasick::AhoCorasick::builder()
        .match_kind(aho_corasick::MatchKind::LeftmostLongest)
        .build(matches)
        .map(Some)
}

/// How many times a result filter's matches (`set`; the filter named `name`) occur in `text`,
/// in one pass; with `redact`, each occurrence is replaced by `[REDACTED:<name>]` (then `true`:
/// the text changed).
pub fn filter_matches(
    text: &mut String,
    set: &aho_corasick::AhoCorasick,
    name: &str,
    redact: bool,
) -> (u32, bool) {
    let cuts: Vec<(usize, usize, &str)> = set
        .find_iter(text.as_str())
        .map(|m| (m.start(), m.end(), name))
        .collect();
    let count = u32::try_from(cuts.len()).unwrap_or(u32::MAX);
    if !redact || cuts.is_empty() {
        return (count, false);
    }
    *text = redacted(text, cuts);
    (count, true)
}

impl Scan<'_> {
    /// One string: one pass of the set; the detectors that matched, alone, to count and redact.
    fn text(&mut self, text: &mut String) {
        let Some(set) = RESULTS.as_ref() else {
            return;
        };
        let (plan, all) = (self.plan, self.all);
        let mut cuts: Vec<(usize, usize, &str)> = Vec::new();
        for (i, re) in set.matching(text, |i| all || plan[i].is_some()) {
            let detector = &DETECTORS[i];
            let mut count = 0;
            for m in re.find_iter(text) {
                if detector.accepts(m.as_str()) {
                    count += 1;
                    if plan[i] == Some(GuardAction::Redact) {
                        cuts.push((m.start(), m.end(), detector.name));
                    }
                }
            }
            if count > 0 {
                self.findings.add(i, count, plan[i]);
            }
        }
        if !cuts.is_empty() {
            *text = redacted(text, cuts);
            self.changed = true;
        }
    }
}

/// `text` with each cut (`start`, `end`, detector's name) replaced by `[REDACTED:<detector>]`;
/// cuts that overlap merge into the first's.
fn redacted(text: &str, mut cuts: Vec<(usize, usize, &str)>) -> String {
    cuts.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end, detector) in cuts {
        if end <= at {
            continue;
        }
        if start >= at {
            out.push_str(&text[at..start]);
            out.push_str("[REDACTED:");
            out.push_str(detector);
            out.push(']');
        }
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn settings(v: Value) -> Settings {
        serde_json::from_value(v).expect("settings")
    }

    fn action(plan: &Plan, name: &str) -> Option<GuardAction> {
        plan[super::super::detect::index_of(name).expect("known")]
    }

    #[test]
    fn nothing_configured_plans_nothing() {
        let none = Guardrails::compile(&Settings::default(), BTreeMap::new().iter(), []);
        assert!(none.is_empty());
        let site = CallSite {
            tool: "t",
            source_tool: "t",
            source: "p",
            agent: None,
        };
        assert_eq!(none.plan(site), None);
        // A level that only turns detectors off plans nothing either.
        let off = Guardrails::compile(&settings(json!({"detect": {"credentials": "off"}})), [], []);
        assert_eq!(off.plan(site), None);
    }

    #[test]
    fn levels_merge_agent_over_source_over_global_and_detector_over_group() {
        let global = settings(json!({
            "detect": {"credentials": "redact", "email": "flag"},
            "tools": {"p_read": {"jwt": "block"}}
        }));
        let sources = BTreeMap::from([(
            "p".to_owned(),
            settings(json!({"tools": {"read": {"personal_data": "block", "email": "redact"}}})),
        )]);
        let agents = BTreeMap::from([(
            "bot".to_owned(),
            settings(json!({"detect": {"credentials": "off", "injection": "block"}})),
        )]);
        let g = Guardrails::compile(&global, &sources, &agents);
        let site = CallSite {
            tool: "p_read",
            source_tool: "read",
            source: "p",
            agent: None,
        };
        let plan = g.plan(site).expect("plan");
        assert_eq!(action(&plan, "aws_access_key"), Some(GuardAction::Redact));
        assert_eq!(action(&plan, "jwt"), Some(GuardAction::Block));
        assert_eq!(action(&plan, "email"), Some(GuardAction::Redact));
        assert_eq!(action(&plan, "iban"), Some(GuardAction::Block));
        assert_eq!(action(&plan, "zero_width"), None);
        let bot = g
            .plan(CallSite {
                agent: Some("bot"),
                ..site
            })
            .expect("plan");
        assert_eq!(action(&bot, "aws_access_key"), None);
        assert_eq!(action(&bot, "zero_width"), Some(GuardAction::Block));
        assert_eq!(action(&bot, "email"), Some(GuardAction::Redact));
    }

    #[test]
    fn filters_merge_like_detectors_and_off_removes_one() {
        let global = settings(json!({"detect": {"plugin:acme/tickets": "flag", "email": "flag"}}));
        let sources = BTreeMap::from([(
            "p".to_owned(),
            settings(json!({"tools": {"read": {"plugin:acme/tickets": "redact"}}})),
        )]);
        let agents = BTreeMap::from([(
            "bot".to_owned(),
            settings(json!({"detect": {"plugin:acme/tickets": "off", "plugin:acme/x": "block"}})),
        )]);
        let g = Guardrails::compile(&global, &sources, &agents);
        let site = CallSite {
            tool: "p_read",
            source_tool: "read",
            source: "p",
            agent: None,
        };
        let key = |k: &str| k.to_owned();
        assert_eq!(
            g.filters(site),
            vec![(key("plugin:acme/tickets"), GuardAction::Redact)]
        );
        let bot = CallSite {
            agent: Some("bot"),
            ..site
        };
        assert_eq!(
            g.filters(bot),
            vec![(key("plugin:acme/x"), GuardAction::Block)]
        );
        // A filter key never enters the built-in detectors' plan.
        let only = Guardrails::compile(
            &settings(json!({"detect": {"plugin:a/f": "block"}})),
            [],
            [],
        );
        assert_eq!(only.plan(site), None);
        assert_eq!(only.filters(site).len(), 1);
    }

    #[test]
    fn redaction_reaches_text_and_structured_content_and_keeps_json_valid() {
        let plan = plan_of(&BTreeMap::from([
            ("credentials".to_owned(), GuardAction::Redact),
            ("email".to_owned(), GuardAction::Flag),
        ]));
        let mut result = json!({
            "content": [
                {"type": "text", "text": "key AKIAIOSFODNN7EXAMPLE \"quoted\" ok"},
                {"type": "image", "data": "Zr8Qk2Lm9Vx4Tn7Bw1Hy6Jc3Pd5Fs0GaUeRoWiXq", "mimeType": "image/png"}
            ],
            "structuredContent": {"user": {"mail": "ana@example.org", "keys": ["AKIAIOSFODNN7EXAMPLE"]}}
        });
        let (findings, changed) = scan(&mut result, &plan, false);
        assert!(changed);
        assert_eq!(
            result["content"][0]["text"],
            "key [REDACTED:aws_access_key] \"quoted\" ok"
        );
        assert_eq!(
            result["structuredContent"]["user"]["keys"][0],
            "[REDACTED:aws_access_key]"
        );
        assert_eq!(
            result["content"][1]["data"], "Zr8Qk2Lm9Vx4Tn7Bw1Hy6Jc3Pd5Fs0GaUeRoWiXq",
            "binary data is not text"
        );
        let text = result.to_string();
        assert!(!text.contains("AKIA"), "{text}");
        assert!(serde_json::from_str::<Value>(&text).is_ok());
        let names: Vec<_> = findings.0.iter().map(|f| (f.name(), f.count)).collect();
        assert_eq!(names, vec![("aws_access_key", 2), ("email", 1)]);
        assert_eq!(findings.blocking(), None);
    }

    #[test]
    fn overlapping_finds_redact_once() {
        let text = "x eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U y";
        let plan = plan_of(&BTreeMap::from([(
            "credentials".to_owned(),
            GuardAction::Redact,
        )]));
        let mut result = json!({"content": [{"type": "text", "text": text}]});
        scan(&mut result, &plan, false);
        let out = result["content"][0]["text"].as_str().unwrap_or_default();
        assert!(out.starts_with("x [REDACTED:"), "{out}");
        assert!(out.ends_with("] y"), "{out}");
        assert!(!out.contains("eyJ"), "{out}");
    }
}
