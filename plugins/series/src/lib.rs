//! `mcp-series`: per-user health time series for mcp-host, in an embedded SQLite database.
//!
//! Modelled on the Mirobody `GoalService` (`count_readings_above_goal`): readings of named indicators
//! (`heart_rate`, `steps`, `weight`, ...) with a value, a unit and a time, owned by a user. Every tool
//! takes the caller from the host ([`UserInfo`], filled in from verified credentials and never part of
//! the schema) and reads and writes only that user's rows; no tool takes a user id.
//!
//! | service | tool | what it does |
//! |---|---|---|
//! | `Readings` | `record_reading` | store one reading (value, unit, time; default now) and return it with its id |
//! | `Readings` | `query_health_indicators` | the caller's indicators with unit, count and first/last time |
//! | `Readings` | `query_readings` | one indicator over a time window, newest first, paginated (`next_cursor`) |
//! | `Readings` | `count_readings_above_goal` | how many recent readings reached a goal value, and when |
//! | `Readings` | `delete_reading` | soft-delete one of the caller's readings by id (asks the user to confirm when the client supports elicitation) |
//!
//! It also serves the caller's readings as a resource template, `series://readings/{indicator}`
//! (the last 30 days, JSON; the indicator completes from the caller's own indicators), and a prompt,
//! `summarise_period`, that embeds that resource for a number of days and asks for a summary.
//!
//! # Storage
//!
//! One SQLite file (bundled SQLite, no system library needed) in WAL mode with `synchronous=NORMAL`
//! and a 5 s busy timeout, so several host processes may share it. Its directory is created when the
//! plugin loads; the file is opened (and created, and `demo_user` seeded) by the first call that needs
//! it, since opening and setting it up costs about a millisecond that a host start would otherwise pay
//! before answering anything. So a database that cannot be opened (a corrupt file, one from a newer
//! mcp-series) is reported by that call's error, and tried again at the next call. Table `readings (id, user_id, indicator, value, unit, start_time, deleted)`, indexed
//! on `(user_id, indicator, start_time)`. Times are stored as Unix seconds (UTC, whole seconds) and
//! shown as RFC 3339 UTC (`2026-01-15T08:30:00Z`). Indicator names are case-insensitive (stored in
//! lower case); each indicator keeps one unit per user. Deleting only marks a row `deleted = 1`;
//! deleted readings never appear in any result.
//!
//! Writes run in `BEGIN IMMEDIATE` transactions on one writer connection; reads use a small pool of
//! read-only connections (WAL readers never wait for the writer), so concurrent calls from the host's
//! worker threads neither lose nor mix rows.
//!
//! # Configuration
//!
//! ```yaml
//! plugins:
//!   mcp-series:
//!     config:
//!       # The SQLite file. Default `series.db`. A relative path resolves against the plugin's
//!       # data directory, `<data_dir>/mcp-series` (the host's `data_dir` setting; by default
//!       # `$XDG_DATA_HOME/mcp-host`), never against the host's working directory.
//!       database: series.db
//!       # Optional. When set and that user has no readings yet, seed 30 days of demo data for them
//!       # (heart_rate, steps, weight, sleep_hours), e.g. for `mcp-host call ... --user demo`.
//!       demo_user: demo
//! ```

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use jiff::tz::Offset;
use mcp_plugin_sdk::{
    CallContext, CompletionRequest, Content, Elicitation, HostApi, InputKind, LogLevel,
    PromptMessage, PromptResult, UserInfo, export_plugin, json, service,
};
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The database file when the config names none.
const DEFAULT_DATABASE: &str = "series.db";
/// How long a connection waits for another writer (this or another process) before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Idle read connections kept for reuse.
const MAX_IDLE_READERS: usize = 8;
/// The schema version this build writes (`PRAGMA user_version`).
const SCHEMA_VERSION: i64 = 1;
/// `query_readings`: default and maximum page size.
const DEFAULT_LIMIT: u32 = 100;
const MAX_LIMIT: u32 = 1000;
/// `count_readings_above_goal`: the most matching times returned.
const MAX_GOAL_TIMES: usize = 20;
/// The longest accepted indicator name and unit.
const MAX_INDICATOR_LEN: usize = 64;
const MAX_UNIT_LEN: usize = 32;
/// How far in the future a reading's time may be (clock skew), in seconds.
const MAX_FUTURE_SECS: i64 = 86_400;
/// Days of demo data seeded for `demo_user`.
const DEMO_DAYS: i64 = 30;
/// Days of readings in the `series://readings/{indicator}` resource.
const RESOURCE_DAYS: i64 = 30;
/// The longest period `summarise_period` accepts, in days.
const MAX_PERIOD_DAYS: i64 = 3650;

const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS readings (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        user_id    TEXT    NOT NULL,
        indicator  TEXT    NOT NULL,
        value      REAL    NOT NULL,
        unit       TEXT    NOT NULL,
        start_time INTEGER NOT NULL,  -- Unix seconds, UTC
        deleted    INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX IF NOT EXISTS readings_user_indicator_time
        ON readings (user_id, indicator, start_time);
";

const TIME_FORMAT: &str = "expected RFC 3339 with a UTC offset, e.g. \"2026-01-15T08:30:00Z\" or \
     \"2026-01-15T09:30:00+01:00\" (a bare date such as \"2026-01-15\" means midnight UTC; \"now\" is \
     also accepted)";

/// One stored reading.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Reading {
    /// The reading's id (pass it to `delete_reading`).
    pub id: i64,
    /// The indicator name (lower case), e.g. `heart_rate`.
    pub indicator: String,
    /// The measured value, in `unit`.
    pub value: f64,
    /// The unit of `value`, e.g. `bpm`, `count`, `kg`, `h`.
    pub unit: String,
    /// When the measurement was taken, RFC 3339 UTC, e.g. `2026-01-15T08:30:00Z`.
    pub start_time: String,
}

/// One of the caller's indicators.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct IndicatorSummary {
    /// The exact indicator name to pass to the other tools, e.g. `steps`.
    pub indicator: String,
    /// The unit its values are recorded in, e.g. `count`.
    pub unit: String,
    /// How many readings there are.
    pub count: u64,
    /// The time of the oldest reading, RFC 3339 UTC.
    pub first: String,
    /// The time of the newest reading, RFC 3339 UTC.
    pub last: String,
}

/// The caller's indicators.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct IndicatorList {
    /// One entry per indicator, sorted by name (empty when the caller has no readings).
    pub indicators: Vec<IndicatorSummary>,
}

/// One page of an indicator's readings.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ReadingPage {
    /// The indicator queried.
    pub indicator: String,
    /// Its unit.
    pub unit: String,
    /// The readings, newest first.
    pub readings: Vec<Reading>,
    /// Pass this as `cursor` (with the same other arguments) for the next, older page; `null` when
    /// there are no more readings.
    pub next_cursor: Option<String>,
}

/// How many recent readings reached a goal (the Mirobody `count_readings_above_goal` result).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct GoalCount {
    /// The indicator examined.
    pub indicator: String,
    /// The goal, in the indicator's unit.
    pub goal: f64,
    /// How many readings fell in the window.
    pub readings_examined: u64,
    /// How many of them were at or above the goal.
    pub readings_above_goal: u64,
    /// When those readings were taken, newest first, RFC 3339 UTC (at most 20).
    pub times: Vec<String>,
}

/// The outcome of a delete.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Deletion {
    /// The id asked for.
    pub id: i64,
    /// Whether a reading was deleted by this call.
    pub deleted: bool,
    /// `deleted`, or `no such reading` when the caller has no (undeleted) reading with this id.
    pub message: String,
}

/// The plugin's config section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    database: Option<String>,
    demo_user: Option<String>,
}

/// The caller's health readings (heart rate, steps, weight, sleep, ...) in the plugin's SQLite
/// database. Every tool reads and writes only the authenticated caller's own readings.
#[derive(Debug)]
pub struct Readings {
    path: PathBuf,
    /// Seeded with demo readings when the database is first opened.
    demo_user: Option<String>,
    /// Where the first open is logged (none when opened directly with [`Readings::open`]).
    host: Option<HostApi>,
    /// The connections, from the first call that needs them.
    db: OnceLock<Db>,
    /// Held while the database is being opened, so only one call opens it.
    opening: Mutex<()>,
}

/// The open database: one writer connection and a pool of idle readers.
#[derive(Debug)]
struct Db {
    path: PathBuf,
    journal_mode: String,
    writer: Mutex<Connection>,
    idle_readers: Mutex<Vec<Connection>>,
}

#[service]
impl Readings {
    /// The database named by the `database` config key (its directory created now, the file
    /// opened or created at the first call, `demo_user` seeded then).
    pub fn new(host: &HostApi) -> Result<Self, String> {
        let config: Config = host.config_as().map_err(|e| {
            format!(
                "invalid mcp-series config ({e}): expected `database: <path>` (default \
                 {DEFAULT_DATABASE}) and optionally `demo_user: <user id>`"
            )
        })?;
        let database = config.database.as_deref().unwrap_or(DEFAULT_DATABASE);
        if database.trim().is_empty() {
            return Err("config key `database` is empty: give a path, e.g. data/series.db".into());
        }
        let path = Path::new(database);
        let path = if path.is_absolute() {
            path.to_path_buf()
        } else {
            let dir = host.data_dir().map_err(|e| {
                format!(
                    "database {database}: a relative path is kept in the plugin's data directory, \
                     and the host gave none ({e}); give an absolute path"
                )
            })?;
            dir.join(path)
        };
        let mut svc = Readings::lazy(&path, config.demo_user.as_deref())?;
        host.log(
            LogLevel::Info,
            "Readings",
            &format!(
                "database {} (opened at the first call that needs it)",
                svc.path.display()
            ),
        );
        svc.host = Some(host.clone());
        Ok(svc)
    }

    /// Record one health reading for the current user, e.g. a heart rate of 72 bpm measured now, or
    /// today's step count. Returns the stored reading with its id. Reuse an existing indicator name
    /// and unit when there is one (query_health_indicators lists them); a new name starts a new
    /// series.
    ///
    /// # Arguments
    /// * `indicator` - Indicator name: letters, digits, `_`, `-` or `.`, case-insensitive, e.g.
    ///   "heart_rate", "steps", "weight", "sleep_hours", "blood_glucose".
    /// * `value` - The measured value in `unit`, e.g. 72 or 68.5.
    /// * `unit` - The unit of the value, e.g. "bpm", "count", "kg", "h", "mmol/L". Must match the
    ///   unit the indicator already uses.
    /// * `start_time` - When it was measured, RFC 3339 with an offset, e.g. "2026-01-15T08:30:00Z"
    ///   or "2026-01-15T09:30:00+01:00". Default: now.
    #[tool(title = "Record a reading")]
    pub fn record_reading(
        &self,
        caller: UserInfo,
        indicator: String,
        value: f64,
        unit: String,
        start_time: Option<String>,
    ) -> Result<Reading, String> {
        let user = user_of(&caller)?;
        let indicator = indicator_name(&indicator)?;
        let unit = unit_name(&unit)?;
        if !value.is_finite() {
            return Err(format!("value must be a finite number, got {value}"));
        }
        let now = now_secs();
        let at = match start_time.as_deref() {
            Some(s) => parse_time("start_time", s)?,
            None => now,
        };
        if at > now + MAX_FUTURE_SECS {
            return Err(format!(
                "start_time {} is more than a day in the future: a reading records a past \
                 measurement (now is {})",
                fmt_time(at),
                fmt_time(now)
            ));
        }
        let id = self.write(|tx| {
            let existing = indicator_unit(tx, user, &indicator)?;
            if let Some(existing) = existing.filter(|u| *u != unit) {
                return Err(format!(
                    "indicator {indicator:?} is recorded in {existing:?}, not {unit:?}: convert \
                     the value to {existing} or use another indicator name"
                ));
            }
            insert(tx, user, &indicator, value, &unit, at)
        })?;
        Ok(Reading {
            id,
            indicator,
            value,
            unit,
            start_time: fmt_time(at),
        })
    }

    /// List the current user's health indicators (e.g. heart_rate, steps, weight) with their unit,
    /// number of readings and the time of the first and last reading. Call this first to learn the
    /// exact indicator names and units the other tools expect.
    #[tool(read_only, idempotent, title = "List my health indicators")]
    pub fn query_health_indicators(&self, caller: UserInfo) -> Result<IndicatorList, String> {
        let user = user_of(&caller)?;
        self.read(|conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT indicator, MAX(unit), COUNT(*), MIN(start_time), MAX(start_time) \
                     FROM readings WHERE user_id = ?1 AND deleted = 0 \
                     GROUP BY indicator ORDER BY indicator",
                )
                .map_err(db_err)?;
            let indicators = stmt
                .query_map(params![user], |r| {
                    Ok(IndicatorSummary {
                        indicator: r.get(0)?,
                        unit: r.get(1)?,
                        count: get_count(r, 2)?,
                        first: fmt_time(r.get(3)?),
                        last: fmt_time(r.get(4)?),
                    })
                })
                .and_then(Iterator::collect)
                .map_err(db_err)?;
            Ok(IndicatorList { indicators })
        })
    }

    /// Get the current user's readings of one indicator in a time window, newest first, one page at
    /// a time. When `next_cursor` in the result is not null, call again with it as `cursor` (and the
    /// same other arguments) for older readings.
    ///
    /// # Arguments
    /// * `indicator` - Exact indicator name, as listed by query_health_indicators, e.g. "heart_rate".
    /// * `since` - Oldest time to include, RFC 3339, e.g. "2026-01-01T00:00:00Z" or "2026-01-01".
    ///   Default: no lower bound.
    /// * `until` - Newest time to include, RFC 3339, e.g. "2026-01-31T23:59:59Z". Default: no upper
    ///   bound.
    /// * `limit` - Readings per page, 1 to 1000 (default 100).
    /// * `cursor` - The `next_cursor` of the previous page, unchanged. Omit for the first page.
    #[tool(read_only, idempotent, title = "Query readings")]
    pub fn query_readings(
        &self,
        caller: UserInfo,
        indicator: String,
        since: Option<String>,
        until: Option<String>,
        #[arg(default = 100, min = 1, max = 1000)] limit: u32,
        cursor: Option<String>,
    ) -> Result<ReadingPage, String> {
        let user = user_of(&caller)?;
        let indicator = indicator_name(&indicator)?;
        let since = since
            .as_deref()
            .map(|s| parse_time("since", s))
            .transpose()?;
        let until = until
            .as_deref()
            .map(|s| parse_time("until", s))
            .transpose()?;
        if let (Some(a), Some(b)) = (since, until)
            && a > b
        {
            return Err(format!(
                "since ({}) is after until ({}): swap them",
                fmt_time(a),
                fmt_time(b)
            ));
        }
        let after = cursor.as_deref().map(parse_cursor).transpose()?;
        let limit = if limit == 0 {
            DEFAULT_LIMIT
        } else {
            limit.min(MAX_LIMIT)
        };
        self.read(|conn| {
            let unit = known_indicator(conn, user, &indicator)?;
            let (cursor_time, cursor_id) = after.unwrap_or((i64::MAX, i64::MAX));
            let mut stmt = conn
                .prepare_cached(
                    "SELECT id, value, unit, start_time FROM readings \
                     WHERE user_id = ?1 AND indicator = ?2 AND deleted = 0 \
                       AND start_time >= ?3 AND start_time <= ?4 \
                       AND (start_time < ?5 OR (start_time = ?5 AND id < ?6)) \
                     ORDER BY start_time DESC, id DESC LIMIT ?7",
                )
                .map_err(db_err)?;
            let rows: Vec<(Reading, i64)> = stmt
                .query_map(
                    params![
                        user,
                        indicator,
                        since.unwrap_or(i64::MIN),
                        until.unwrap_or(i64::MAX),
                        cursor_time,
                        cursor_id,
                        i64::from(limit) + 1,
                    ],
                    |r| {
                        let at: i64 = r.get(3)?;
                        Ok((
                            Reading {
                                id: r.get(0)?,
                                indicator: indicator.clone(),
                                value: r.get(1)?,
                                unit: r.get(2)?,
                                start_time: fmt_time(at),
                            },
                            at,
                        ))
                    },
                )
                .and_then(Iterator::collect)
                .map_err(db_err)?;
            let more = rows.len() > limit as usize;
            let mut readings = Vec::with_capacity(rows.len().min(limit as usize));
            let mut last = None;
            for (reading, at) in rows.into_iter().take(limit as usize) {
                last = Some((at, reading.id));
                readings.push(reading);
            }
            Ok(ReadingPage {
                indicator: indicator.clone(),
                unit,
                readings,
                next_cursor: last.filter(|_| more).map(|(at, id)| format!("{at}_{id}")),
            })
        })
    }

    /// Count how many of the current user's recent readings of an indicator reached a goal value,
    /// e.g. "on how many days this month did I walk 8000 steps?". Returns how many readings were
    /// examined, how many were at or above the goal, and when (newest first, at most 20). Call
    /// query_health_indicators first to get the exact indicator name and its unit.
    ///
    /// # Arguments
    /// * `indicator` - Exact indicator name, as listed by query_health_indicators, e.g. "steps".
    /// * `goal` - The value a reading has to reach, in the indicator's own unit, e.g. 8000 (steps)
    ///   or 7.5 (sleep hours).
    /// * `days` - How many days back from now to look, 1 to 3650 (default 30).
    #[tool(read_only, idempotent, title = "Count readings at or above a goal")]
    pub fn count_readings_above_goal(
        &self,
        caller: UserInfo,
        indicator: String,
        goal: f64,
        #[arg(default = 30, min = 1, max = 3650)] days: u32,
    ) -> Result<GoalCount, String> {
        let user = user_of(&caller)?;
        let indicator = indicator_name(&indicator)?;
        if !goal.is_finite() {
            return Err(format!("goal must be a finite number, got {goal}"));
        }
        let days = i64::from(days.clamp(1, 3650));
        let since = now_secs() - days * 86_400;
        self.read(|conn| {
            known_indicator(conn, user, &indicator)?;
            let (examined, above): (u64, u64) = conn
                .prepare_cached(
                    "SELECT COUNT(*), COALESCE(SUM(value >= ?4), 0) FROM readings \
                     WHERE user_id = ?1 AND indicator = ?2 AND deleted = 0 AND start_time >= ?3",
                )
                .and_then(|mut s| {
                    s.query_row(params![user, indicator, since, goal], |r| {
                        Ok((get_count(r, 0)?, get_count(r, 1)?))
                    })
                })
                .map_err(db_err)?;
            let mut stmt = conn
                .prepare_cached(
                    "SELECT start_time FROM readings \
                     WHERE user_id = ?1 AND indicator = ?2 AND deleted = 0 AND start_time >= ?3 \
                       AND value >= ?4 \
                     ORDER BY start_time DESC, id DESC LIMIT ?5",
                )
                .map_err(db_err)?;
            let times = stmt
                .query_map(
                    params![user, indicator, since, goal, MAX_GOAL_TIMES as i64],
                    |r| r.get::<_, i64>(0).map(fmt_time),
                )
                .and_then(Iterator::collect)
                .map_err(db_err)?;
            Ok(GoalCount {
                indicator: indicator.clone(),
                goal,
                readings_examined: examined,
                readings_above_goal: above,
                times,
            })
        })
    }

    /// Delete one of the current user's readings by id (e.g. a mistaken entry). The reading
    /// disappears from every query. Returns whether a reading was deleted; an id that is unknown,
    /// already deleted or not the user's own gives `deleted: false`, "no such reading".
    ///
    /// # Arguments
    /// * `id` - The reading's id, as returned by record_reading or query_readings, e.g. 42.
    #[tool(destructive, idempotent, title = "Delete a reading")]
    pub fn delete_reading(
        &self,
        caller: UserInfo,
        ctx: &CallContext,
        #[arg(min = 1)] id: i64,
    ) -> Result<Deletion, String> {
        let user = user_of(&caller)?;
        // Ask before acting: with a 2026 client this function runs again with the answer.
        if ctx.client_supports(InputKind::Elicitation) {
            let Some(reading) = self.reading(user, id)? else {
                return Ok(Deletion {
                    id,
                    deleted: false,
                    message: "no such reading".into(),
                });
            };
            let question = Elicitation::form(
                format!(
                    "Delete your {} reading of {} {} taken {}?",
                    reading.indicator, reading.value, reading.unit, reading.start_time
                ),
                json!({
                    "type": "object",
                    "properties": {
                        "confirm": {"type": "boolean", "title": "Delete it", "default": false}
                    },
                    "required": ["confirm"]
                }),
            );
            let answer = ctx.elicit("confirm_delete", question)?;
            if !answer.is_accepted() || answer.content_value("confirm") != Some(&json!(true)) {
                return Ok(Deletion {
                    id,
                    deleted: false,
                    message: "kept: not confirmed".into(),
                });
            }
        }
        let changed = self.write(|tx| {
            tx.prepare_cached(
                "UPDATE readings SET deleted = 1 WHERE id = ?1 AND user_id = ?2 AND deleted = 0",
            )
            .and_then(|mut s| s.execute(params![id, user]))
            .map_err(db_err)
        })?;
        Ok(Deletion {
            id,
            deleted: changed > 0,
            message: if changed > 0 {
                "deleted".into()
            } else {
                "no such reading".into()
            },
        })
    }

    /// The current user's readings of one indicator over the last 30 days, newest first (at most
    /// 1000), as JSON. Indicator names are the ones query_health_indicators lists.
    #[resource(
        uri = "series://readings/{indicator}",
        name = "readings",
        title = "My readings of one indicator",
        mime_type = "application/json"
    )]
    pub fn readings_resource(
        &self,
        caller: UserInfo,
        #[arg(complete = Self::complete_indicator)] indicator: String,
    ) -> Result<Option<ReadingPage>, String> {
        self.recent(&caller, &indicator, RESOURCE_DAYS)
    }

    /// Summarise my readings of one indicator over a period: the readings are embedded and the
    /// model is asked for trends, extremes and anything unusual.
    ///
    /// # Arguments
    /// * `indicator` - The indicator, e.g. "steps" (see query_health_indicators).
    /// * `days` - How many days back from now, 1 to 3650 (default 7).
    #[prompt(title = "Summarise a period")]
    pub fn summarise_period(
        &self,
        caller: UserInfo,
        #[arg(complete = Self::complete_indicator)] indicator: String,
        days: Option<String>,
    ) -> Result<PromptResult, String> {
        let days = match days.as_deref().map(str::trim) {
            None | Some("") => 7,
            Some(d) => d
                .parse::<i64>()
                .ok()
                .filter(|d| (1..=MAX_PERIOD_DAYS).contains(d))
                .ok_or_else(|| {
                    format!("days must be a whole number from 1 to {MAX_PERIOD_DAYS}, not {d:?}")
                })?,
        };
        let page = self.recent(&caller, &indicator, days)?.ok_or_else(|| {
            format!("you have no readings of {indicator:?} (query_health_indicators lists yours)")
        })?;
        let data = mcp_plugin_sdk::serde_json::to_string(&page).map_err(|e| e.to_string())?;
        Ok(PromptResult::new(vec![
            PromptMessage::user(Content::resource_text(
                format!("series://readings/{}", page.indicator),
                "application/json",
                data,
            )),
            PromptMessage::user(format!(
                "Above are my {} readings ({}) of the last {days} days, newest first. Summarise \
                 them: the overall trend, the highest and lowest values and when they happened, \
                 and anything unusual. Keep it short.",
                page.indicator, page.unit
            )),
        ])
        .with_description(format!("{} over the last {days} days", page.indicator)))
    }

    /// The caller's indicators that start with what was typed.
    fn complete_indicator(&self, request: &CompletionRequest) -> Result<Vec<String>, String> {
        let Some(caller) = &request.caller else {
            return Ok(Vec::new());
        };
        let all = self.query_health_indicators(caller.clone())?;
        Ok(all
            .indicators
            .into_iter()
            .map(|i| i.indicator)
            .filter(|name| request.matches(name))
            .collect())
    }
}

impl Readings {
    /// The caller's readings of `indicator` in the last `days` days, newest first (at most
    /// [`MAX_LIMIT`]); `None` when they have no readings of it.
    fn recent(
        &self,
        caller: &UserInfo,
        indicator: &str,
        days: i64,
    ) -> Result<Option<ReadingPage>, String> {
        let user = user_of(caller)?;
        let name = indicator_name(indicator)?;
        if self
            .read(|conn| indicator_unit(conn, user, &name))?
            .is_none()
        {
            return Ok(None);
        }
        let since = fmt_time(now_secs() - days * 86_400);
        self.query_readings(caller.clone(), name, Some(since), None, MAX_LIMIT, None)
            .map(Some)
    }

    /// One of `user`'s undeleted readings.
    fn reading(&self, user: &str, id: i64) -> Result<Option<Reading>, String> {
        self.read(|conn| {
            conn.prepare_cached(
                "SELECT id, indicator, value, unit, start_time FROM readings \
                 WHERE id = ?1 AND user_id = ?2 AND deleted = 0",
            )
            .and_then(|mut s| {
                s.query_row(params![id, user], |r| {
                    Ok(Reading {
                        id: r.get(0)?,
                        indicator: r.get(1)?,
                        value: r.get(2)?,
                        unit: r.get(3)?,
                        start_time: fmt_time(r.get(4)?),
                    })
                })
                .optional()
            })
            .map_err(db_err)
        })
    }
}

impl Readings {
    /// Open (creating it and its parent directories if needed) the database at `database`, set it up
    /// (WAL, schema) and, when `demo_user` is given and has no readings, seed demo data for them.
    /// The path must be absolute: [`Readings::new`] resolves configured paths against the
    /// plugin's data directory.
    pub fn open(database: &Path, demo_user: Option<&str>) -> Result<Self, String> {
        let svc = Readings::lazy(database, demo_user)?;
        svc.db()?;
        Ok(svc)
    }

    /// Check the arguments and create the database's directory; the file is opened by [`Self::db`].
    fn lazy(database: &Path, demo_user: Option<&str>) -> Result<Self, String> {
        if !database.is_absolute() {
            return Err(format!(
                "database path {} is not absolute",
                database.display()
            ));
        }
        let demo_user = match demo_user.map(str::trim) {
            Some("") => {
                return Err("config key `demo_user` is empty: give a user id, e.g. demo".into());
            }
            other => other.map(str::to_owned),
        };
        let path = database.to_path_buf();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create the directory of {}: {e}", path.display()))?;
        }
        Ok(Readings {
            path,
            demo_user,
            host: None,
            db: OnceLock::new(),
            opening: Mutex::new(()),
        })
    }

    /// The open database: opened, set up and seeded by the first call that needs it (a call that
    /// fails to open it returns why, and the next call tries again).
    fn db(&self) -> Result<&Db, String> {
        if let Some(db) = self.db.get() {
            return Ok(db);
        }
        let _opening = lock(&self.opening);
        if let Some(db) = self.db.get() {
            return Ok(db);
        }
        let db = Db::open(&self.path)?;
        if let Some(demo) = &self.demo_user {
            db.seed_demo(demo)?;
        }
        if let Some(host) = &self.host {
            host.log(
                LogLevel::Info,
                "Readings",
                &format!(
                    "database {} (journal mode {})",
                    db.path.display(),
                    db.journal_mode
                ),
            );
            if db.journal_mode != "wal" {
                host.log(
                    LogLevel::Warning,
                    "Readings",
                    "the database is not in WAL mode (unsupported file system?): reads may wait \
                     for writes",
                );
            }
        }
        Ok(self.db.get_or_init(|| db))
    }

    /// The resolved database path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// [`Db::write`] on the database, opened if need be.
    fn write<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, String>,
    ) -> Result<T, String> {
        self.db()?.write(f)
    }

    /// [`Db::read`] on the database, opened if need be.
    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T, String>) -> Result<T, String> {
        self.db()?.read(f)
    }
}

impl Db {
    /// Open (or create) the file at `path` and set it up: WAL, schema.
    fn open(path: &Path) -> Result<Db, String> {
        let path = path.to_path_buf();
        let fail = |e: rusqlite::Error| format!("cannot open database {}: {e}", path.display());
        let mut writer = Connection::open(&path).map_err(fail)?;
        writer.busy_timeout(BUSY_TIMEOUT).map_err(fail)?;
        let journal_mode: String = writer
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(fail)?;
        writer
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(fail)?;
        {
            let tx = writer
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(fail)?;
            let version: i64 = tx
                .pragma_query_value(None, "user_version", |r| r.get(0))
                .map_err(fail)?;
            if version > SCHEMA_VERSION {
                return Err(format!(
                    "database {} has schema version {version}, newer than this mcp-series \
                     ({SCHEMA_VERSION}): upgrade the plugin",
                    path.display()
                ));
            }
            tx.execute_batch(SCHEMA).map_err(fail)?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(fail)?;
            tx.commit().map_err(fail)?;
        }
        Ok(Db {
            path,
            journal_mode: journal_mode.to_ascii_lowercase(),
            writer: Mutex::new(writer),
            idle_readers: Mutex::new(Vec::new()),
        })
    }

    /// Seed [`demo_readings`] for `user` unless they already have readings (deleted ones count, so
    /// a user who cleared the demo data does not get it back when the database is next opened). Returns how many
    /// readings were added.
    fn seed_demo(&self, user: &str) -> Result<usize, String> {
        let today = now_secs().div_euclid(86_400) * 86_400;
        self.write(|tx| {
            let has_rows: bool = tx
                .query_row(
                    "SELECT EXISTS (SELECT 1 FROM readings WHERE user_id = ?1)",
                    params![user],
                    |r| r.get(0),
                )
                .map_err(db_err)?;
            if has_rows {
                return Ok(0);
            }
            let rows = demo_readings(today);
            for (indicator, value, unit, at) in &rows {
                insert(tx, user, indicator, *value, unit, *at)?;
            }
            Ok(rows.len())
        })
    }

    /// Run `f` in a `BEGIN IMMEDIATE` transaction on the writer connection; commit when it succeeds,
    /// roll back when it fails (or panics).
    fn write<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, String>,
    ) -> Result<T, String> {
        let mut conn = lock(&self.writer);
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db_err)?;
        let out = f(&tx)?;
        tx.commit().map_err(db_err)?;
        Ok(out)
    }

    /// Run `f` on a pooled read-only connection, inside one read transaction (a consistent
    /// snapshot across its statements).
    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T, String>) -> Result<T, String> {
        let conn = self.reader()?;
        let tx = conn.unchecked_transaction().map_err(db_err)?;
        let out = f(&tx);
        drop(tx);
        out
    }

    fn reader(&self) -> Result<PooledReader<'_>, String> {
        let idle = lock(&self.idle_readers).pop();
        let conn = match idle {
            Some(c) => c,
            None => {
                let fail = |e: rusqlite::Error| {
                    format!("cannot open database {}: {e}", self.path.display())
                };
                let c = Connection::open_with_flags(
                    &self.path,
                    OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )
                .map_err(fail)?;
                c.busy_timeout(BUSY_TIMEOUT).map_err(fail)?;
                c.pragma_update(None, "query_only", true).map_err(fail)?;
                c
            }
        };
        Ok(PooledReader {
            pool: self,
            conn: Some(conn),
        })
    }
}

/// A read connection that goes back to the idle list when dropped.
struct PooledReader<'a> {
    pool: &'a Db,
    conn: Option<Connection>,
}

impl Deref for PooledReader<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        match &self.conn {
            Some(c) => c,
            None => unreachable!("the connection is only taken on drop"),
        }
    }
}

impl Drop for PooledReader<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take()
            && !std::thread::panicking()
        {
            let mut idle = lock(&self.pool.idle_readers);
            if idle.len() < MAX_IDLE_READERS {
                idle.push(conn);
            }
        }
    }
}

/// A poisoned lock only means another call panicked; the connection itself is still sound (its
/// transaction rolled back when it was dropped).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A `COUNT(*)` / `SUM(...)` column (never negative) as `u64`.
fn get_count(row: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<u64> {
    row.get::<_, i64>(idx)
        .map(|n| u64::try_from(n).unwrap_or(0))
}

fn db_err(e: rusqlite::Error) -> String {
    format!("database error: {e}")
}

fn insert(
    tx: &rusqlite::Transaction<'_>,
    user: &str,
    indicator: &str,
    value: f64,
    unit: &str,
    at: i64,
) -> Result<i64, String> {
    tx.prepare_cached(
        "INSERT INTO readings (user_id, indicator, value, unit, start_time) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .and_then(|mut s| s.insert(params![user, indicator, value, unit, at]))
    .map_err(db_err)
}

/// The unit the user's (undeleted) readings of `indicator` use, if there are any.
fn indicator_unit(
    conn: &Connection,
    user: &str,
    indicator: &str,
) -> Result<Option<String>, String> {
    conn.prepare_cached(
        "SELECT unit FROM readings \
         WHERE user_id = ?1 AND indicator = ?2 AND deleted = 0 LIMIT 1",
    )
    .and_then(|mut s| {
        s.query_row(params![user, indicator], |r| r.get(0))
            .optional()
    })
    .map_err(db_err)
}

/// The unit of `indicator` when the user has (undeleted) readings of it, else a clear error that
/// lists the names they do have.
fn known_indicator(conn: &Connection, user: &str, indicator: &str) -> Result<String, String> {
    let unit = indicator_unit(conn, user, indicator)?;
    if let Some(unit) = unit {
        return Ok(unit);
    }
    let names: Vec<String> = conn
        .prepare_cached(
            "SELECT DISTINCT indicator FROM readings WHERE user_id = ?1 AND deleted = 0 \
             ORDER BY indicator LIMIT 50",
        )
        .and_then(|mut s| s.query_map(params![user], |r| r.get(0))?.collect())
        .map_err(db_err)?;
    Err(if names.is_empty() {
        format!(
            "unknown indicator {indicator:?}: you have no readings yet (record_reading adds one)"
        )
    } else {
        format!(
            "unknown indicator {indicator:?}: you have no readings of it. Your indicators: {} \
             (query_health_indicators shows their units and counts)",
            names.join(", ")
        )
    })
}

/// The caller's user id exactly as the host verified it: never trimmed or otherwise normalized
/// (`"demo "` is not `demo`), and refused when empty or padded with whitespace.
fn user_of(caller: &UserInfo) -> Result<&str, String> {
    let user = caller.user_id.as_str();
    if user.is_empty() {
        Err("this tool needs an authenticated caller, and the call had none".into())
    } else if user.trim() != user {
        Err("the caller's user id has leading or trailing whitespace; it is refused".into())
    } else {
        Ok(user)
    }
}

/// Validate and normalize (trim, lower-case) an indicator name.
fn indicator_name(raw: &str) -> Result<String, String> {
    let name = raw.trim().to_ascii_lowercase();
    let valid = !name.is_empty()
        && name.len() <= MAX_INDICATOR_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if valid {
        Ok(name)
    } else {
        Err(format!(
            "invalid indicator name {raw:?}: use 1 to {MAX_INDICATOR_LEN} letters, digits, '_', '-' \
             or '.', e.g. \"heart_rate\" or \"steps\""
        ))
    }
}

fn unit_name(raw: &str) -> Result<String, String> {
    let unit = raw.trim();
    if unit.is_empty() || unit.chars().count() > MAX_UNIT_LEN || unit.chars().any(char::is_control)
    {
        return Err(format!(
            "invalid unit {raw:?}: give 1 to {MAX_UNIT_LEN} characters, e.g. \"bpm\", \"count\", \
             \"kg\" or \"h\""
        ));
    }
    Ok(unit.to_owned())
}

fn now_secs() -> i64 {
    Timestamp::now().as_second()
}

/// RFC 3339 UTC, e.g. `2026-01-15T08:30:00Z`.
fn fmt_time(secs: i64) -> String {
    match Timestamp::from_second(secs) {
        Ok(t) => t.to_string(),
        Err(_) => secs.to_string(),
    }
}

/// Parse an RFC 3339 time (or a bare date, read as midnight UTC, or `now`) into Unix seconds.
fn parse_time(field: &str, input: &str) -> Result<i64, String> {
    let s = input.trim();
    if s.eq_ignore_ascii_case("now") {
        return Ok(now_secs());
    }
    if s.len() == 10
        && let Ok(date) = s.parse::<jiff::civil::Date>()
    {
        return Offset::UTC
            .to_timestamp(date.to_datetime(jiff::civil::Time::midnight()))
            .map(|t| t.as_second())
            .map_err(|e| format!("{field} {s:?} is out of range: {e}"));
    }
    s.parse::<Timestamp>()
        .map(|t| t.as_second())
        .map_err(|e| format!("invalid {field} {s:?} ({e}): {TIME_FORMAT}"))
}

fn parse_cursor(cursor: &str) -> Result<(i64, i64), String> {
    cursor
        .trim()
        .split_once('_')
        .and_then(|(t, id)| Some((t.parse().ok()?, id.parse().ok()?)))
        .ok_or_else(|| {
            format!(
                "invalid cursor {cursor:?}: pass the next_cursor of the previous query_readings \
                 result unchanged, or omit it for the first page"
            )
        })
}

/// The demo dataset: 30 days before the UTC day starting at `today` (Unix seconds), with heart rate
/// four times a day (bpm), the daily step count (count, about half the days above 8000), the morning
/// weight (kg, trending down) and the night's sleep (h). Deterministic: the same `today` always gives
/// the same rows.
pub fn demo_readings(today: i64) -> Vec<(&'static str, f64, &'static str, i64)> {
    let mut rows = Vec::new();
    for day in 1..=DEMO_DAYS {
        let d = day as f64;
        let midnight = today - day * 86_400;
        let at = |h: i64, m: i64| midnight + h * 3600 + m * 60;
        let sleep = 7.1 + 0.9 * (d * 0.7).cos() + ((day * 3) % 5) as f64 * 0.1 - 0.2;
        rows.push(("sleep_hours", round1(sleep), "h", at(6, 45)));
        let weight = 74.0 - 0.05 * (DEMO_DAYS - day) as f64 + ((day * 5) % 7) as f64 * 0.1 - 0.3;
        rows.push(("weight", round1(weight), "kg", at(7, 0)));
        for (k, (h, m, base)) in [
            (7, 15, 61.0),
            (12, 30, 74.0),
            (18, 10, 92.0),
            (22, 40, 66.0),
        ]
        .into_iter()
        .enumerate()
        {
            let wiggle = ((day * 7 + k as i64 * 13) % 11) as f64 - 5.0;
            rows.push(("heart_rate", base + wiggle, "bpm", at(h, m)));
        }
        let steps = 8200.0 + 3400.0 * (d * 0.9).sin() + ((day * 37) % 13) as f64 * 120.0 - 700.0;
        rows.push(("steps", steps.round(), "count", at(21, 30)));
    }
    rows
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

export_plugin!(load: on_first_call, services: [Readings]);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use mcp_plugin_sdk::testing::{CallEvent, TestCall};
    use mcp_plugin_sdk::{ElicitResult, InputError};
    use std::sync::Arc;

    /// Delete as `user` from a client that cannot answer questions (no confirmation asked).
    fn delete(svc: &Readings, user: &str, id: i64) -> Result<Deletion, String> {
        let call = TestCall::new().with_client_capabilities(json!({}));
        Readings::delete_reading(svc, who(user), &call.context(), id)
    }

    #[test]
    fn delete_asks_for_confirmation_when_the_client_can_answer_and_respects_the_answer() {
        let (_dir, svc) = db();
        let r = record(&svc, "u", "steps", 100.0, "2026-01-01T00:00:00Z");
        // First round (a 2026 client): the question goes out, nothing is deleted.
        let asking = TestCall::new();
        let asked = Readings::delete_reading(&svc, who("u"), &asking.context(), r.id);
        assert_eq!(asked.unwrap_err(), InputError::Asked.to_string());
        assert!(
            matches!(&asking.events()[..], [CallEvent::Input { key, .. }] if key == "confirm_delete")
        );
        let declined = TestCall::new().answering("confirm_delete", ElicitResult::decline());
        let kept = Readings::delete_reading(&svc, who("u"), &declined.context(), r.id).unwrap();
        assert!(!kept.deleted, "{kept:?}");
        assert_eq!(page(&svc, "u", "steps", 10, None).readings.len(), 1);
        let yes = TestCall::new().answering(
            "confirm_delete",
            ElicitResult::accept(json!({"confirm": true})),
        );
        let gone = Readings::delete_reading(&svc, who("u"), &yes.context(), r.id).unwrap();
        assert!(gone.deleted, "{gone:?}");
        assert!(
            Readings::query_health_indicators(&svc, who("u"))
                .unwrap()
                .indicators
                .is_empty()
        );
    }

    #[test]
    fn the_readings_resource_and_the_summary_prompt_are_the_callers_own() {
        let (_dir, svc) = db();
        let now = fmt_time(now_secs() - 3600);
        record(&svc, "u", "steps", 1234.0, &now);
        record(&svc, "v", "weight", 80.0, &now);
        let mine = Readings::readings_resource(&svc, who("u"), "steps".into())
            .unwrap()
            .unwrap();
        assert_eq!(mine.readings.len(), 1);
        assert!(
            Readings::readings_resource(&svc, who("u"), "weight".into())
                .unwrap()
                .is_none()
        );
        let p =
            Readings::summarise_period(&svc, who("u"), "steps".into(), Some("3".into())).unwrap();
        assert_eq!(p.messages.len(), 2);
        assert!(
            Readings::summarise_period(&svc, who("u"), "steps".into(), Some("0".into())).is_err()
        );
        let names = Readings::complete_indicator(
            &svc,
            &CompletionRequest::new("indicator", "st").with_caller(who("u")),
        );
        assert_eq!(names.unwrap(), ["steps"]);
    }

    fn db() -> (tempfile::TempDir, Readings) {
        let dir = tempfile::tempdir().unwrap();
        let svc = Readings::open(&dir.path().join("nested/dir/s.db"), None).unwrap();
        (dir, svc)
    }

    fn who(user: &str) -> UserInfo {
        UserInfo::new(user)
    }

    fn record(svc: &Readings, user: &str, ind: &str, value: f64, at: &str) -> Reading {
        Readings::record_reading(
            svc,
            who(user),
            ind.into(),
            value,
            "u".into(),
            Some(at.into()),
        )
        .unwrap()
    }

    fn page(
        svc: &Readings,
        user: &str,
        ind: &str,
        limit: u32,
        cursor: Option<String>,
    ) -> ReadingPage {
        Readings::query_readings(svc, who(user), ind.into(), None, None, limit, cursor).unwrap()
    }

    #[test]
    fn record_and_read_back() {
        let (_dir, svc) = db();
        assert_eq!(svc.db().unwrap().journal_mode, "wal");
        let r = Readings::record_reading(
            &svc,
            who("alice"),
            " Heart_Rate ".into(),
            72.5,
            "bpm".into(),
            Some("2026-01-15T09:30:00+01:00".into()),
        )
        .unwrap();
        assert_eq!(r.indicator, "heart_rate");
        assert_eq!(r.start_time, "2026-01-15T08:30:00Z");
        assert!(r.id > 0);
        let now = Readings::record_reading(
            &svc,
            who("alice"),
            "heart_rate".into(),
            70.0,
            "bpm".into(),
            None,
        )
        .unwrap();
        assert!((parse_time("t", &now.start_time).unwrap() - now_secs()).abs() < 5);
        let p = page(&svc, "alice", "HEART_RATE", 10, None);
        assert_eq!(p.unit, "bpm");
        assert_eq!(p.readings, vec![now, r.clone()]);
        assert_eq!(p.next_cursor, None);

        let list = Readings::query_health_indicators(&svc, who("alice")).unwrap();
        assert_eq!(list.indicators.len(), 1);
        let s = &list.indicators[0];
        assert_eq!(
            (s.indicator.as_str(), s.unit.as_str(), s.count),
            ("heart_rate", "bpm", 2)
        );
        assert_eq!(s.first, "2026-01-15T08:30:00Z");
    }

    #[test]
    fn a_user_id_is_taken_exactly_as_verified() {
        let (_dir, svc) = db();
        record(&svc, "demo", "steps", 9000.0, "2026-01-15T09:30:00Z");
        for padded in ["demo ", " demo", "demo\n"] {
            let err = Readings::query_health_indicators(&svc, who(padded)).unwrap_err();
            assert!(err.contains("whitespace"), "{err}");
        }
        let list = Readings::query_health_indicators(&svc, who("demo")).unwrap();
        assert_eq!(list.indicators.len(), 1);
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let (_dir, svc) = db();
        let rec = |ind: &str, v: f64, unit: &str, at: Option<&str>| {
            Readings::record_reading(
                &svc,
                who("a"),
                ind.into(),
                v,
                unit.into(),
                at.map(Into::into),
            )
        };
        let e = rec("hr", 1.0, "bpm", Some("yesterday")).unwrap_err();
        assert!(e.contains("2026-01-15T08:30:00Z"), "{e}");
        assert!(
            rec("hr", 1.0, "bpm", Some("2026-01-15T08:30:00")).is_err(),
            "no offset"
        );
        assert!(
            rec("hr", 1.0, "bpm", Some("2026-01-15")).is_ok(),
            "bare date is midnight UTC"
        );
        assert!(
            rec("hr", f64::NAN, "bpm", None)
                .unwrap_err()
                .contains("finite")
        );
        assert!(rec("hr", f64::INFINITY, "bpm", None).is_err());
        assert!(
            rec("heart rate!", 1.0, "bpm", None)
                .unwrap_err()
                .contains("heart_rate")
        );
        assert!(rec("", 1.0, "bpm", None).is_err());
        assert!(rec("hr", 1.0, " ", None).is_err());
        assert!(
            rec("hr", 1.0, "bpm", Some("2999-01-01T00:00:00Z"))
                .unwrap_err()
                .contains("future")
        );
        let e = rec("hr", 1.0, "beats", None).unwrap_err();
        assert!(e.contains("\"bpm\""), "unit mismatch: {e}");

        let e = Readings::query_readings(&svc, who("a"), "steps".into(), None, None, 10, None)
            .unwrap_err();
        assert!(e.contains("unknown indicator") && e.contains("hr"), "{e}");
        let e = Readings::count_readings_above_goal(&svc, who("nobody"), "hr".into(), 1.0, 30)
            .unwrap_err();
        assert!(e.contains("no readings yet"), "{e}");
        assert!(
            Readings::count_readings_above_goal(&svc, who("a"), "hr".into(), f64::NAN, 30).is_err()
        );
        let e = Readings::query_readings(
            &svc,
            who("a"),
            "hr".into(),
            None,
            None,
            10,
            Some("x".into()),
        )
        .unwrap_err();
        assert!(e.contains("cursor"), "{e}");
        let e = Readings::query_readings(
            &svc,
            who("a"),
            "hr".into(),
            Some("2026-02-01".into()),
            Some("2026-01-01".into()),
            10,
            None,
        )
        .unwrap_err();
        assert!(e.contains("after"), "{e}");
        assert!(Readings::query_health_indicators(&svc, who(" ")).is_err());
    }

    #[test]
    fn users_never_see_each_other() {
        let (_dir, svc) = db();
        let a = record(&svc, "alice", "steps", 100.0, "2026-01-01T00:00:00Z");
        let b = record(&svc, "bob", "steps", 999.0, "2026-01-02T00:00:00Z");
        record(&svc, "bob", "weight", 80.0, "2026-01-02T00:00:00Z");

        let alice = Readings::query_health_indicators(&svc, who("alice")).unwrap();
        assert_eq!(alice.indicators.len(), 1);
        assert_eq!(alice.indicators[0].count, 1);
        assert_eq!(
            page(&svc, "alice", "steps", 10, None).readings,
            vec![a.clone()]
        );
        let e = Readings::query_readings(&svc, who("alice"), "weight".into(), None, None, 10, None)
            .unwrap_err();
        assert!(e.contains("unknown indicator") && !e.contains("bob"), "{e}");
        let g = Readings::count_readings_above_goal(&svc, who("alice"), "steps".into(), 0.0, 3650)
            .unwrap();
        assert_eq!(g.readings_examined, 1);

        // A forged delete of bob's id does nothing and says no more than for a missing id.
        let forged = delete(&svc, "alice", b.id).unwrap();
        let missing = delete(&svc, "alice", 1_000_000).unwrap();
        assert!(!forged.deleted);
        assert_eq!(forged.message, missing.message);
        assert_eq!(page(&svc, "bob", "steps", 10, None).readings, vec![b]);
        // Alice may use a unit of her own for an indicator bob also has.
        assert!(
            Readings::record_reading(
                &svc,
                who("alice"),
                "weight".into(),
                150.0,
                "lb".into(),
                None
            )
            .is_ok()
        );
    }

    #[test]
    fn pagination_walks_every_reading_once_newest_first() {
        let (_dir, svc) = db();
        // 25 readings, several sharing a time, to exercise the (time, id) cursor.
        let mut ids = Vec::new();
        for i in 0..25 {
            let at = format!("2026-01-{:02}T12:00:00Z", 1 + i / 3);
            ids.push(record(&svc, "u", "hr", f64::from(i), &at).id);
        }
        record(&svc, "other", "hr", 1.0, "2026-01-05T00:00:00Z");
        let mut seen = Vec::new();
        let mut cursor = None;
        let mut pages = 0;
        loop {
            let p = page(&svc, "u", "hr", 10, cursor);
            pages += 1;
            seen.extend(p.readings.iter().map(|r| (r.start_time.clone(), r.id)));
            match p.next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        assert_eq!(pages, 3);
        let mut want: Vec<(String, i64)> = seen.clone();
        want.sort_by(|a, b| b.cmp(a));
        assert_eq!(seen, want, "newest first, ties by id descending");
        let mut got: Vec<i64> = seen.iter().map(|s| s.1).collect();
        got.sort();
        assert_eq!(got, ids);
        // An exact multiple of the page size ends with a null cursor, not an empty page.
        let p = page(&svc, "u", "hr", 25, None);
        assert_eq!((p.readings.len(), p.next_cursor), (25, None));

        // Time window, inclusive at both ends.
        let w = Readings::query_readings(
            &svc,
            who("u"),
            "hr".into(),
            Some("2026-01-02T12:00:00Z".into()),
            Some("2026-01-03".into()),
            100,
            None,
        )
        .unwrap();
        assert_eq!(w.readings.len(), 3);
        assert!(
            w.readings
                .iter()
                .all(|r| r.start_time == "2026-01-02T12:00:00Z")
        );
        // Oversized limits are capped.
        let big = Readings::query_readings(&svc, who("u"), "hr".into(), None, None, 5000, None);
        assert_eq!(big.unwrap().readings.len(), 25);
    }

    #[test]
    fn goal_count_matches_the_seed_example() {
        let (_dir, svc) = db();
        let now = now_secs();
        for (i, v) in [9000.0, 7999.0, 8000.0, 12000.0, 3000.0]
            .into_iter()
            .enumerate()
        {
            let at = fmt_time(now - (i as i64 + 1) * 86_400);
            record(&svc, "u", "steps", v, &at);
        }
        record(&svc, "u", "steps", 50_000.0, &fmt_time(now - 40 * 86_400)); // outside 30 days
        let g = Readings::count_readings_above_goal(&svc, who("u"), "steps".into(), 8000.0, 30)
            .unwrap();
        assert_eq!(g.indicator, "steps");
        assert_eq!(g.goal, 8000.0);
        assert_eq!(g.readings_examined, 5);
        assert_eq!(g.readings_above_goal, 3, "8000 itself reaches the goal");
        assert_eq!(
            g.times,
            vec![
                fmt_time(now - 86_400),
                fmt_time(now - 3 * 86_400),
                fmt_time(now - 4 * 86_400)
            ]
        );
        let g = Readings::count_readings_above_goal(&svc, who("u"), "steps".into(), 8000.0, 60)
            .unwrap();
        assert_eq!((g.readings_examined, g.readings_above_goal), (6, 4));
        // At most 20 times, newest first.
        for i in 0..30 {
            record(&svc, "v", "x", 1.0, &fmt_time(now - 3600 * (i + 1) + 1800));
        }
        let g = Readings::count_readings_above_goal(&svc, who("v"), "x".into(), 1.0, 1).unwrap();
        assert_eq!((g.readings_examined, g.readings_above_goal), (24, 24));
        assert_eq!(g.times.len(), 20);
        assert_eq!(g.times[0], fmt_time(now - 1800));
    }

    #[test]
    fn soft_delete_hides_the_reading_everywhere() {
        let (_dir, svc) = db();
        let keep = record(&svc, "u", "steps", 9000.0, &fmt_time(now_secs() - 60));
        let gone = record(&svc, "u", "steps", 9500.0, &fmt_time(now_secs() - 120));
        let d = delete(&svc, "u", gone.id).unwrap();
        assert!(d.deleted);
        let again = delete(&svc, "u", gone.id).unwrap();
        assert!(!again.deleted);
        assert_eq!(again.message, "no such reading");
        assert_eq!(
            page(&svc, "u", "steps", 10, None).readings,
            vec![keep.clone()]
        );
        let list = Readings::query_health_indicators(&svc, who("u")).unwrap();
        assert_eq!(list.indicators[0].count, 1);
        let g =
            Readings::count_readings_above_goal(&svc, who("u"), "steps".into(), 0.0, 1).unwrap();
        assert_eq!(g.readings_examined, 1);
        // The row is still there, only marked.
        let deleted: i64 = lock(&svc.db().unwrap().writer)
            .query_row(
                "SELECT deleted FROM readings WHERE id = ?1",
                [gone.id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(deleted, 1);
        // Deleting the last reading of an indicator makes it unknown.
        delete(&svc, "u", keep.id).unwrap();
        assert!(
            Readings::query_health_indicators(&svc, who("u"))
                .unwrap()
                .indicators
                .is_empty()
        );
        assert!(
            Readings::query_readings(&svc, who("u"), "steps".into(), None, None, 10, None).is_err()
        );
    }

    #[test]
    fn a_relative_database_lives_in_the_plugin_data_directory_and_tools_need_a_caller() {
        use mcp_plugin_sdk::testing::{TestCallError, TestHost, TestPlugin};
        let data = tempfile::tempdir().unwrap();
        let plugin = TestPlugin::with_host(
            TestHost::new()
                .with_data_dir(data.path())
                .with_config(mcp_plugin_sdk::json!({"database": "db/s.db", "demo_user": "demo"})),
        );
        // The directory is made at start, the file at the first call that needs it.
        assert!(data.path().join("db").is_dir());
        assert!(!data.path().join("db/s.db").exists());
        assert_eq!(
            plugin.call("query_health_indicators", mcp_plugin_sdk::json!({})),
            Err(TestCallError::CallerRequired(
                "query_health_indicators".into()
            ))
        );
        let demo = plugin
            .call_as(
                &who("demo"),
                "count_readings_above_goal",
                mcp_plugin_sdk::json!({"indicator": "steps", "goal": 8000, "days": 31}),
            )
            .unwrap();
        assert!(!demo.is_error, "{}", demo.text());
        assert_eq!(demo.structured_content.unwrap()["readings_examined"], 30);
        assert!(data.path().join("db/s.db").is_file());
        // The caller is never an argument, whatever the client sends.
        let forged = plugin
            .call_as(
                &who("eve"),
                "query_health_indicators",
                mcp_plugin_sdk::json!({"user_info": {"user_id": "demo"}}),
            )
            .unwrap();
        assert!(forged.is_error);
        assert!(forged.text().contains("`user_info` is not allowed"));

        // Without a data directory, a relative path is refused rather than put in the working
        // directory.
        let nowhere = TestPlugin::with_host(
            TestHost::new().with_config(mcp_plugin_sdk::json!({"database": "s.db"})),
        );
        assert!(nowhere.tools().is_empty());
        let why = &nowhere.problems()["record_reading"];
        assert!(why.contains("give an absolute path"), "{why}");
    }

    #[test]
    fn demo_user_is_seeded_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("demo.db");
        let svc = Readings::open(&path, Some("demo")).unwrap();
        let list = Readings::query_health_indicators(&svc, who("demo")).unwrap();
        let counts: Vec<(&str, &str, u64)> = list
            .indicators
            .iter()
            .map(|s| (s.indicator.as_str(), s.unit.as_str(), s.count))
            .collect();
        assert_eq!(
            counts,
            vec![
                ("heart_rate", "bpm", 120),
                ("sleep_hours", "h", 30),
                ("steps", "count", 30),
                ("weight", "kg", 30)
            ]
        );
        let g = Readings::count_readings_above_goal(&svc, who("demo"), "steps".into(), 8000.0, 31)
            .unwrap();
        assert_eq!(g.readings_examined, 30);
        assert!((8..=22).contains(&g.readings_above_goal), "{g:?}");
        assert!(
            Readings::query_health_indicators(&svc, who("alice"))
                .unwrap()
                .indicators
                .is_empty()
        );
        // Reopening (or a deleted reading) does not seed again.
        let first = page(&svc, "demo", "weight", 1, None).readings[0].id;
        delete(&svc, "demo", first).unwrap();
        drop(svc);
        let svc = Readings::open(&path, Some("demo")).unwrap();
        let list = Readings::query_health_indicators(&svc, who("demo")).unwrap();
        assert_eq!(list.indicators.iter().map(|s| s.count).sum::<u64>(), 209);
        // The data set is deterministic.
        assert_eq!(
            demo_readings(86_400 * 20_000),
            demo_readings(86_400 * 20_000)
        );
        assert!(Readings::open(&path, Some(" ")).is_err());
    }

    #[test]
    fn concurrent_writers_lose_and_mix_nothing() {
        let (_dir, svc) = db();
        let svc = Arc::new(svc);
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let svc = Arc::clone(&svc);
                std::thread::spawn(move || {
                    let user = format!("user{t}");
                    for i in 0..500 {
                        let value = f64::from(t * 1000 + i);
                        Readings::record_reading(
                            &svc,
                            who(&user),
                            "steps".into(),
                            value,
                            "count".into(),
                            None,
                        )
                        .unwrap();
                        if i % 50 == 0 {
                            // Reads interleave with the writes.
                            Readings::query_health_indicators(&svc, who(&user)).unwrap();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        for t in 0..8 {
            let user = format!("user{t}");
            let list = Readings::query_health_indicators(&svc, who(&user)).unwrap();
            assert_eq!(list.indicators.len(), 1);
            assert_eq!(list.indicators[0].count, 500, "{user}");
            let p =
                Readings::query_readings(&svc, who(&user), "steps".into(), None, None, 1000, None)
                    .unwrap();
            assert_eq!(p.readings.len(), 500);
            let lo = f64::from(t * 1000);
            assert!(
                p.readings
                    .iter()
                    .all(|r| (lo..lo + 500.0).contains(&r.value)),
                "{user}"
            );
        }
    }

    #[test]
    fn two_services_share_one_file() {
        // Two opens of one file stand in for two host processes: busy_timeout + IMMEDIATE serialize.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.db");
        let a = Arc::new(Readings::open(&path, None).unwrap());
        let b = Arc::new(Readings::open(&path, None).unwrap());
        let threads: Vec<_> = [Arc::clone(&a), Arc::clone(&b), a.clone(), b.clone()]
            .into_iter()
            .enumerate()
            .map(|(t, svc)| {
                std::thread::spawn(move || {
                    for i in 0..100 {
                        Readings::record_reading(
                            &svc,
                            who("same"),
                            "x".into(),
                            f64::from(i),
                            "u".into(),
                            None,
                        )
                        .unwrap();
                    }
                    t
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let list = Readings::query_health_indicators(&a, who("same")).unwrap();
        assert_eq!(list.indicators[0].count, 400);
    }

    #[test]
    fn config_keys() {
        let c: Config = mcp_plugin_sdk::serde_json::from_value(mcp_plugin_sdk::json!({
            "database": "data/s.db", "demo_user": "demo"
        }))
        .unwrap();
        assert_eq!(c.database.as_deref(), Some("data/s.db"));
        assert_eq!(c.demo_user.as_deref(), Some("demo"));
        let typo = mcp_plugin_sdk::serde_json::from_value::<Config>(mcp_plugin_sdk::json!({
            "demo-user": "demo"
        }));
        assert!(typo.is_err());
    }
}
