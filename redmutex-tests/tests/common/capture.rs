//! A `tracing` subscriber and a `metrics` recorder that keep everything they are given,
//! for tests that assert what redmutex reports. Both are installed process-wide (the
//! locker's background tasks run on any thread); tests tell their records apart by the
//! lock names and locker names they use.
#![allow(dead_code)]

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Field name → value, as text.
pub type Fields = BTreeMap<String, String>;

/// A span as it ended up: its name, and every field given or recorded later.
#[derive(Debug, Clone)]
pub struct SpanRecord {
    pub name: &'static str,
    pub fields: Fields,
    parent: Option<u64>,
}

/// An event: its level, message and fields, and the fields of the spans it was in.
#[derive(Debug, Clone)]
pub struct EventRecord {
    pub level: Level,
    pub message: String,
    pub fields: Fields,
    pub span_fields: Fields,
}

impl EventRecord {
    /// The lock the event is about: its own `lock.name`, or its span's.
    pub fn lock_name(&self) -> Option<&str> {
        (self.fields.get("lock.name"))
            .or_else(|| self.span_fields.get("lock.name"))
            .map(String::as_str)
    }
}

#[derive(Default)]
struct Store {
    spans: Mutex<HashMap<u64, SpanRecord>>,
    events: Mutex<Vec<EventRecord>>,
    next: AtomicU64,
}

thread_local! {
    /// The spans entered on this thread, innermost last.
    static ENTERED: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

struct Capture(Arc<Store>);

struct Visitor<'a>(&'a mut Fields);

impl Visit for Visitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Store {
    /// The fields of span `id` and of the spans around it (inner ones win).
    fn fields_within(&self, id: Option<u64>) -> Fields {
        let spans = self.spans.lock().unwrap();
        let mut fields = Fields::new();
        let mut next = id;
        while let Some(id) = next {
            let Some(span) = spans.get(&id) else { break };
            for (name, value) in &span.fields {
                fields.entry(name.clone()).or_insert_with(|| value.clone());
            }
            next = span.parent;
        }
        fields
    }
}

fn innermost() -> Option<u64> {
    ENTERED.with(|entered| entered.borrow().last().copied())
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.0.next.fetch_add(1, Ordering::Relaxed) + 1;
        let mut fields = Fields::new();
        span.record(&mut Visitor(&mut fields));
        let parent = match span.parent() {
            Some(parent) => Some(parent.into_u64()),
            None if span.is_contextual() => innermost(),
            None => None,
        };
        let record = SpanRecord {
            name: span.metadata().name(),
            fields,
            parent,
        };
        self.0.spans.lock().unwrap().insert(id, record);
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        if let Some(record) = self.0.spans.lock().unwrap().get_mut(&span.into_u64()) {
            values.record(&mut Visitor(&mut record.fields));
        }
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields::new();
        event.record(&mut Visitor(&mut fields));
        let message = fields.remove("message").unwrap_or_default();
        let within = match event.parent() {
            Some(parent) => Some(parent.into_u64()),
            None if event.is_contextual() => innermost(),
            None => None,
        };
        let record = EventRecord {
            level: *event.metadata().level(),
            message,
            fields,
            span_fields: self.0.fields_within(within),
        };
        self.0.events.lock().unwrap().push(record);
    }

    fn enter(&self, span: &Id) {
        ENTERED.with(|entered| entered.borrow_mut().push(span.into_u64()));
    }

    fn exit(&self, span: &Id) {
        ENTERED.with(|entered| {
            let mut entered = entered.borrow_mut();
            if let Some(at) = entered.iter().rposition(|id| *id == span.into_u64()) {
                entered.remove(at);
            }
        });
    }
}

static TRACES: OnceLock<Arc<Store>> = OnceLock::new();

/// The process-wide trace store, installing the subscriber on first use.
fn traces() -> &'static Arc<Store> {
    TRACES.get_or_init(|| {
        let store = Arc::new(Store::default());
        tracing::subscriber::set_global_default(Capture(store.clone()))
            .expect("no other subscriber in this test binary");
        store
    })
}

/// Starts capturing traces (idempotent).
pub fn capture_traces() {
    traces();
}

/// The spans named `name` about lock `lock` (their `lock.name` field).
pub fn spans(name: &str, lock: &str) -> Vec<Fields> {
    let spans = traces().spans.lock().unwrap();
    let mut found: Vec<(u64, Fields)> = (spans.iter())
        .filter(|(_, span)| span.name == name)
        .filter(|(_, span)| span.fields.get("lock.name").map(String::as_str) == Some(lock))
        .map(|(id, span)| (*id, span.fields.clone()))
        .collect();
    found.sort_by_key(|(id, _)| *id);
    found.into_iter().map(|(_, fields)| fields).collect()
}

/// The events about lock `lock` (their own `lock.name`, or their span's).
pub fn events(lock: &str) -> Vec<EventRecord> {
    let events = traces().events.lock().unwrap();
    (events.iter())
        .filter(|event| event.lock_name() == Some(lock))
        .cloned()
        .collect()
}

/// Every event whose message is `message`.
pub fn events_saying(message: &str) -> Vec<EventRecord> {
    let events = traces().events.lock().unwrap();
    (events.iter())
        .filter(|event| event.message == message)
        .cloned()
        .collect()
}

/// Every text captured so far: span and event names, messages, field values.
pub fn all_trace_text() -> String {
    let mut text = String::new();
    for span in traces().spans.lock().unwrap().values() {
        text.push_str(span.name);
        for (name, value) in &span.fields {
            text.push_str(&format!(" {name}={value}"));
        }
        text.push('\n');
    }
    for event in traces().events.lock().unwrap().iter() {
        text.push_str(&format!("{} {}", event.level, event.message));
        for (name, value) in &event.fields {
            text.push_str(&format!(" {name}={value}"));
        }
        text.push('\n');
    }
    text
}

/// Calls `run` once per process (e.g. to install a recorder).
pub fn once(run: impl FnOnce()) {
    static ONCE: Once = Once::new();
    ONCE.call_once(run);
}

/// A `metrics` recorder that keeps every value, by `name{label=value,…}` (labels sorted).
#[cfg(feature = "metrics")]
pub mod recorded {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex, OnceLock};

    use metrics::{
        Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata,
        Recorder, SharedString, Unit,
    };

    #[derive(Default)]
    struct Values {
        counters: Mutex<HashMap<String, Arc<CounterCell>>>,
        gauges: Mutex<HashMap<String, Arc<GaugeCell>>>,
        histograms: Mutex<HashMap<String, Arc<HistogramCell>>>,
        described: Mutex<Vec<String>>,
    }

    #[derive(Default)]
    struct CounterCell(AtomicU64);
    #[derive(Default)]
    struct GaugeCell(Mutex<f64>);
    #[derive(Default)]
    struct HistogramCell(Mutex<Vec<f64>>);

    impl CounterFn for CounterCell {
        fn increment(&self, value: u64) {
            self.0.fetch_add(value, Ordering::Relaxed);
        }
        fn absolute(&self, value: u64) {
            self.0.fetch_max(value, Ordering::Relaxed);
        }
    }

    impl GaugeFn for GaugeCell {
        fn increment(&self, value: f64) {
            *self.0.lock().unwrap() += value;
        }
        fn decrement(&self, value: f64) {
            *self.0.lock().unwrap() -= value;
        }
        fn set(&self, value: f64) {
            *self.0.lock().unwrap() = value;
        }
    }

    impl HistogramFn for HistogramCell {
        fn record(&self, value: f64) {
            self.0.lock().unwrap().push(value);
        }
    }

    struct Keeper(Arc<Values>);

    /// `name{a=1,b=2}`.
    fn render(key: &Key) -> String {
        let mut labels: Vec<String> = key
            .labels()
            .map(|label| format!("{}={}", label.key(), label.value()))
            .collect();
        labels.sort();
        format!("{}{{{}}}", key.name(), labels.join(","))
    }

    fn cell<T: Default>(map: &Mutex<HashMap<String, Arc<T>>>, key: &Key) -> Arc<T> {
        map.lock().unwrap().entry(render(key)).or_default().clone()
    }

    impl Recorder for Keeper {
        fn describe_counter(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
            self.0
                .described
                .lock()
                .unwrap()
                .push(key.as_str().to_owned());
        }
        fn describe_gauge(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
            self.0
                .described
                .lock()
                .unwrap()
                .push(key.as_str().to_owned());
        }
        fn describe_histogram(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
            self.0
                .described
                .lock()
                .unwrap()
                .push(key.as_str().to_owned());
        }
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            Counter::from_arc(cell(&self.0.counters, key))
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::from_arc(cell(&self.0.gauges, key))
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::from_arc(cell(&self.0.histograms, key))
        }
    }

    static VALUES: OnceLock<Arc<Values>> = OnceLock::new();

    fn values() -> &'static Arc<Values> {
        VALUES.get_or_init(|| {
            let values = Arc::new(Values::default());
            metrics::set_global_recorder(Keeper(values.clone()))
                .unwrap_or_else(|_| panic!("no other recorder in this test binary"));
            values
        })
    }

    /// Starts recording (idempotent): before the first locker is built, so that the
    /// descriptions are seen.
    pub fn install() {
        values();
    }

    /// A counter's value (0 if never registered).
    pub fn counter(key: &str) -> u64 {
        let counters = values().counters.lock().unwrap();
        counters.get(key).map_or(0, |c| c.0.load(Ordering::Relaxed))
    }

    /// A gauge's value (0 if never registered).
    pub fn gauge(key: &str) -> f64 {
        let gauges = values().gauges.lock().unwrap();
        gauges.get(key).map_or(0.0, |g| *g.0.lock().unwrap())
    }

    /// The values a histogram recorded.
    pub fn histogram(key: &str) -> Vec<f64> {
        let histograms = values().histograms.lock().unwrap();
        histograms
            .get(key)
            .map_or_else(Vec::new, |h| h.0.lock().unwrap().clone())
    }

    /// Every metric key registered so far.
    pub fn keys() -> Vec<String> {
        let mut keys: Vec<String> = Vec::new();
        keys.extend(values().counters.lock().unwrap().keys().cloned());
        keys.extend(values().gauges.lock().unwrap().keys().cloned());
        keys.extend(values().histograms.lock().unwrap().keys().cloned());
        keys
    }

    /// The metric names described so far.
    pub fn described() -> Vec<String> {
        values().described.lock().unwrap().clone()
    }
}
