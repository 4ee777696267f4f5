//! Finding a type by the name a user writes (`struct request`,
//! `request`, a typedef), as `sdt types` takes it, with the messages that
//! say what to do when it is missing or defined twice; and a layout as
//! the JSON `sdt types --json` prints.

use crate::{DebugInfo, Error, Layout, Lookup, TypeId};

/// Why a type named by a user is not one type.
#[derive(Debug, thiserror::Error)]
pub enum NamedError {
    #[error(transparent)]
    Read(#[from] Error),
    #[error("{file} defines no type `{name}`{}", did_you_mean(suggestions))]
    Missing {
        file: String,
        name: String,
        suggestions: Vec<String>,
    },
    #[error(
        "`{name}` is defined differently in two compilation units of {file}: {}; pick one with --unit (for example --unit {})",
        units.join(" and "),
        units[0].rsplit('/').next().unwrap_or(&units[0])
    )]
    Ambiguous {
        file: String,
        name: String,
        units: Vec<String>,
    },
    #[error("no compilation unit of {file} whose name contains `{unit}` defines `{name}`")]
    NotInUnit {
        file: String,
        name: String,
        unit: String,
    },
}

fn did_you_mean(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}?", suggestions.join(", "))
    }
}

/// The names a user's `name` may mean: itself, and, for a bare name, the
/// struct, union and enum of that name.
fn tries(name: &str) -> Vec<String> {
    if name.contains(' ') {
        return vec![name.to_string()];
    }
    ["", "struct ", "union ", "enum "]
        .iter()
        .map(|kw| format!("{kw}{name}"))
        .collect()
}

impl DebugInfo {
    /// The type a user names: `struct foo`, `union foo`, `enum foo` or a
    /// typedef name; a bare name that is no typedef is tried as a struct,
    /// union and enum in turn. With `unit`, only the compilation units
    /// whose name contains it are searched (for a name defined twice).
    pub fn named(&self, name: &str, unit: Option<&str>) -> Result<TypeId, NamedError> {
        let file = self.debug_file.display().to_string();
        if let Some(unit) = unit {
            for t in tries(name) {
                if let Some(id) = self.find_in_unit(&t, unit)? {
                    return Ok(id);
                }
            }
            return Err(NamedError::NotInUnit {
                file,
                name: name.to_string(),
                unit: unit.to_string(),
            });
        }
        let mut suggestions = Vec::new();
        for t in tries(name) {
            match self.find(&t)? {
                Lookup::Found(id) => return Ok(id),
                Lookup::Ambiguous(defs) => {
                    return Err(NamedError::Ambiguous {
                        file,
                        name: t,
                        units: defs.into_iter().map(|(_, unit)| unit).collect(),
                    })
                }
                Lookup::Missing(close) => suggestions.extend(close),
            }
        }
        suggestions.dedup();
        Err(NamedError::Missing {
            file,
            name: name.to_string(),
            suggestions,
        })
    }
}

impl Layout {
    /// The layout as one JSON object: kind, name, size, padding, target,
    /// members (name, declaration, type, offset, size, hole_before, and
    /// bit_offset and bits for a bitfield) and enumerators (name, value).
    pub fn to_json(&self) -> serde_json::Value {
        let members: Vec<serde_json::Value> = self
            .members
            .iter()
            .map(|m| {
                let mut v = serde_json::json!({
                    "name": m.name,
                    "declaration": m.declaration,
                    "type": m.type_name,
                    "offset": m.offset,
                    "size": m.size,
                    "hole_before": m.hole_before,
                });
                if let Some((bit, bits)) = m.bitfield {
                    v["bit_offset"] = bit.into();
                    v["bits"] = bits.into();
                }
                v
            })
            .collect();
        let enumerators: Vec<serde_json::Value> = self
            .enumerators
            .iter()
            .map(|(name, value)| serde_json::json!({ "name": name, "value": value }))
            .collect();
        serde_json::json!({
            "kind": self.kind,
            "name": self.name,
            "size": self.size,
            "padding": self.padding,
            "target": self.target,
            "members": members,
            "enumerators": enumerators,
        })
    }
}
