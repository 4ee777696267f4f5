//! Each map of a compiled program as a metric: its name (prefix and map
//! name, or what the config says), its help text and its label names (the
//! config's, or read from the key expressions, [`crate::labels`]).
//! Everything the config names is checked against the program here, with
//! errors that point at the directive.

use std::collections::BTreeMap;

use sdt_job::program::Agg;
use sdt_job::program::Diagnostic;
use sdt_job::program::MapDecl;
use sdt_job::program::Script;
use sdt_output::metrics::{is_label_name, is_metric_name};

use crate::config::{Config, ConfigError, FileKind, Origin};
use crate::labels::{first_keys, label_of};

/// The prefix of metric names when neither the command line nor the
/// program gives one.
pub const DEFAULT_PREFIX: &str = "sdt_";

/// The label every series of a program carries: the program's name.
pub const PROGRAM_LABEL: &str = "program";

/// Maps of this prefix are sdt's own (what a span pragma adds): never
/// exported, never printed.
pub use sdt_job::INTERNAL_MAP_PREFIX;

/// Names sdt's own metrics take; no map may take them.
pub const RESERVED: &[&str] = &[
    "sdt_up",
    "sdt_probes_attached",
    "sdt_program_load_seconds",
    "sdt_events_lost",
    "sdt_map_updates_dropped",
    "sdt_dropped_series",
    "sdt_otlp_spans_dropped",
    "sdt_otlp_metrics_dropped",
    "sdt_otlp_export_failures",
];

/// How one map is exported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapNaming {
    /// `@reqs`.
    pub map: String,
    /// The metric family's name.
    pub metric: String,
    pub help: String,
    /// One name for each part of the key.
    pub labels: Vec<String>,
    /// Not exported.
    pub hidden: bool,
}

/// How every map of one program is exported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Naming {
    /// By map (`@reqs`).
    pub maps: BTreeMap<String, MapNaming>,
}

/// The files a program's errors are about: `(name, text)` of the script
/// and of its config file.
pub struct Files<'a> {
    pub script: (&'a str, &'a str),
    pub config: Option<(&'a str, &'a str)>,
}

impl Files<'_> {
    fn error(&self, at: &Origin, diagnostic: Diagnostic) -> ConfigError {
        let (file, source) = match (at.file, self.config) {
            (FileKind::Config, Some(config)) => config,
            _ => self.script,
        };
        ConfigError {
            file: file.to_string(),
            source: source.to_string(),
            diagnostic: Box::new(Diagnostic {
                span: at.span,
                ..diagnostic
            }),
        }
    }
}

impl Naming {
    /// Names the maps `maps` of `script` (from its program file `file`),
    /// with the prefix `prefix` unless the config gives one.
    pub fn new(
        script: &Script,
        maps: &[MapDecl],
        config: &Config,
        prefix: &str,
        files: &Files<'_>,
    ) -> Result<Naming, ConfigError> {
        let error = |at: &Origin, message: String, hint: String| {
            let d = Diagnostic::error(at.span, message);
            files.error(at, if hint.is_empty() { d } else { d.hint(hint) })
        };
        let known: Vec<String> = maps.iter().map(MapDecl::display_name).collect();
        for (map, settings) in &config.maps {
            if !known.contains(map) {
                let at = settings.at.clone().unwrap_or(Origin {
                    file: FileKind::Script,
                    span: Default::default(),
                });
                let user: Vec<&str> = known
                    .iter()
                    .map(String::as_str)
                    .filter(|m| !m.starts_with(&format!("@{INTERNAL_MAP_PREFIX}")))
                    .collect();
                return Err(error(
                    &at,
                    format!("the program has no map {map}"),
                    format!("its maps: {}", user.join(", ")),
                ));
            }
        }
        let prefix = match &config.prefix {
            Some(p) if !is_metric_name(&format!("{}x", p.value)) => {
                return Err(error(
                    &p.at,
                    format!("`{}` cannot start a metric name", p.value),
                    "letters, digits, `_` and `:`, not a digit first".into(),
                ))
            }
            Some(p) => p.value.as_str(),
            None => prefix,
        };
        let mut named = BTreeMap::new();
        let mut taken: BTreeMap<String, String> = BTreeMap::new();
        for decl in maps {
            let map = decl.display_name();
            let settings = config.maps.get(&map).cloned().unwrap_or_default();
            let internal = decl.name.starts_with(INTERNAL_MAP_PREFIX);
            let base = match &settings.name {
                Some(n) => n.value.clone(),
                None if decl.name.is_empty() => "map".to_string(),
                None => decl.name.clone(),
            };
            let metric = format!("{prefix}{base}");
            let at = settings
                .name
                .as_ref()
                .map(|n| n.at.clone())
                .or(settings.at.clone());
            let hidden = settings.hidden || internal;
            if !hidden {
                let at = at.unwrap_or(Origin {
                    file: FileKind::Script,
                    span: decl.span,
                });
                if !is_metric_name(&metric) {
                    return Err(error(
                        &at,
                        format!("`{metric}` cannot name a metric"),
                        "letters, digits, `_` and `:`, not a digit first".into(),
                    ));
                }
                let bare = metric.strip_suffix("_total").unwrap_or(&metric);
                if RESERVED.contains(&bare) {
                    return Err(error(
                        &at,
                        format!("{map} would be the metric `{metric}`, which is sdt's own"),
                        format!("name it otherwise: `// sdt: name {map} = ...`"),
                    ));
                }
                if let Some(other) = taken.insert(bare.to_string(), map.clone()) {
                    return Err(error(
                        &at,
                        format!("{map} and {other} would both be the metric `{metric}`"),
                        format!("name one of them otherwise: `// sdt: name {map} = ...`"),
                    ));
                }
            }
            let labels = match &settings.labels {
                Some(labels) => {
                    if labels.value.len() != decl.keys.len() {
                        return Err(error(
                            &labels.at,
                            format!(
                                "{map} has {} key part{}, and {} label name{} given",
                                decl.keys.len(),
                                if decl.keys.len() == 1 { "" } else { "s" },
                                labels.value.len(),
                                if labels.value.len() == 1 { "" } else { "s" },
                            ),
                            "one name for each part of the key, in order".into(),
                        ));
                    }
                    let reserved = reserved_labels(decl);
                    if let Some(bad) = labels
                        .value
                        .iter()
                        .find(|l| !is_label_name(l) || reserved.contains(&l.as_str()))
                    {
                        return Err(error(
                            &labels.at,
                            format!("`{bad}` cannot name a label of {map}"),
                            format!(
                                "letters, digits and `_`, not a digit or `__` first, and none of {}",
                                reserved.join(", ")
                            ),
                        ));
                    }
                    if let Some(twice) = labels
                        .value
                        .iter()
                        .enumerate()
                        .find(|(i, l)| labels.value[..*i].contains(l))
                    {
                        return Err(error(
                            &labels.at,
                            format!("the label name `{}` is given twice", twice.1),
                            String::new(),
                        ));
                    }
                    labels.value.clone()
                }
                None => default_labels(script, decl),
            };
            let help = settings.help.clone().unwrap_or_else(|| {
                let kind = decl.aggregation().map_or("value", Agg::name);
                format!("{map} ({kind}) of {}", files.script.0)
            });
            named.insert(
                map.clone(),
                MapNaming {
                    map,
                    metric,
                    help,
                    labels,
                    hidden,
                },
            );
        }
        Ok(Naming { maps: named })
    }
}

/// Label names a map's series cannot use: the program's label, and the
/// ones a histogram or summary adds.
fn reserved_labels(decl: &MapDecl) -> Vec<&'static str> {
    match decl.aggregation() {
        Some(Agg::Hist { .. } | Agg::Lhist { .. }) => vec![PROGRAM_LABEL, "le"],
        Some(Agg::Stats { .. }) => vec![PROGRAM_LABEL, "quantile"],
        _ => vec![PROGRAM_LABEL],
    }
}

/// Label names from the key expressions, made valid and distinct.
fn default_labels(script: &Script, decl: &MapDecl) -> Vec<String> {
    let exprs = first_keys(script, &decl.name).unwrap_or_default();
    let reserved = reserved_labels(decl);
    let mut labels: Vec<String> = Vec::with_capacity(decl.keys.len());
    for index in 0..decl.keys.len() {
        let mut name = exprs
            .get(index)
            .map_or_else(|| format!("key{index}"), |e| label_of(e, index));
        if !is_label_name(&name) {
            name = format!("key{index}");
        }
        if reserved.contains(&name.as_str()) {
            name.push('_');
        }
        let base = name.clone();
        let mut n = 2;
        while labels.contains(&name) {
            name = format!("{base}_{n}");
            n += 1;
        }
        labels.push(name);
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;
    use sdt_job::program::{Ty, INT64};

    fn decl(name: &str, keys: usize, value: Ty) -> MapDecl {
        MapDecl {
            name: name.into(),
            keys: vec![INT64; keys],
            value,
            span: Default::default(),
            declared: None,
        }
    }

    fn naming(script: &str, config: &str, maps: &[MapDecl]) -> Result<Naming, String> {
        let files = Files {
            script: ("t.bt", script),
            config: Some(("t.conf", config)),
        };
        let parsed = sdt_job::program::parse(script).unwrap();
        let config = Config::read(files.script, files.config).map_err(|e| e.to_string())?;
        Naming::new(&parsed, maps, &config, DEFAULT_PREFIX, &files).map_err(|e| e.to_string())
    }

    const SCRIPT: &str =
        "usdt:./s:p:a { @lat[pid, pid, arg0] = hist(arg1); @le[cpu] = count(); @[tid] = count(); }";

    #[test]
    fn defaults_read_well_and_are_valid() {
        let maps = [
            decl("lat", 3, Ty::Agg(Agg::Hist { bits: 0 })),
            decl("le", 1, Ty::Agg(Agg::Count)),
            decl("", 1, Ty::Agg(Agg::Count)),
            decl("__sdt_span0_start", 1, INT64),
        ];
        let n = naming(SCRIPT, "", &maps).unwrap();
        let lat = &n.maps["@lat"];
        assert_eq!(lat.metric, "sdt_lat");
        assert_eq!(lat.labels, ["pid", "pid_2", "arg0"]);
        assert_eq!(lat.help, "@lat (hist) of t.bt");
        assert_eq!(n.maps["@"].metric, "sdt_map");
        assert!(n.maps["@__sdt_span0_start"].hidden);
        let n = naming(
            SCRIPT,
            "prefix = web_\nname @le = levels\nlabels @lat = a, b, c\n",
            &maps,
        )
        .unwrap();
        assert_eq!(n.maps["@le"].metric, "web_levels");
        assert_eq!(n.maps["@lat"].labels, ["a", "b", "c"]);
    }

    #[test]
    fn mistakes_are_refused_where_they_are_written() {
        let maps = [
            decl("lat", 3, Ty::Agg(Agg::Hist { bits: 0 })),
            decl("up", 0, Ty::Agg(Agg::Count)),
        ];
        let e = naming(SCRIPT, "labels @lat = a, b\n", &maps).unwrap_err();
        assert!(
            e.contains("@lat has 3 key parts, and 2 label names given"),
            "{e}"
        );
        assert!(e.contains("t.conf:1:"), "{e}");
        let e = naming(SCRIPT, "labels @lat = a, le, c\n", &maps).unwrap_err();
        assert!(e.contains("`le` cannot name a label"), "{e}");
        let e = naming(SCRIPT, "hide @nope\n", &maps).unwrap_err();
        assert!(e.contains("the program has no map @nope"), "{e}");
        assert!(e.contains("@lat, @up"), "{e}");
        let e = naming(SCRIPT, "", &maps).unwrap_err();
        assert!(e.contains("sdt's own"), "{e}");
        let e = naming(SCRIPT, "name @lat = up\n", &[maps[0].clone()]).unwrap_err();
        assert!(e.contains("`sdt_up`, which is sdt's own"), "{e}");
        let e = naming(SCRIPT, "name @lat = 9x\nprefix = \n", &[maps[0].clone()]);
        assert!(e.is_err());
    }
}
