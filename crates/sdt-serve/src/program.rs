//! A program as a served one is read: its script and the config file
//! beside it (`NAME.conf` for `NAME.bt`), and the name its metrics carry
//! in their `program` label (the file's name without `.bt`).

use std::io;
use std::path::{Path, PathBuf};

use sdt_job::program::MapDecl;
use sdt_job::program::Script;

use crate::config::{Config, ConfigError};
use crate::naming::{Files, Naming};

/// A program's files, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramFiles {
    /// The `program` label of its metrics.
    pub name: String,
    /// The script's name in errors (its path), and its text.
    pub script: (String, String),
    /// The config file's path and text, if it has one.
    pub config: Option<(String, String)>,
}

/// The config file of program `path`: the same name, ending in `.conf`.
pub fn config_path(path: &Path) -> PathBuf {
    path.with_extension("conf")
}

impl ProgramFiles {
    /// Reads the program at `path` and, if there is one, its config file.
    pub fn read(path: &Path) -> io::Result<ProgramFiles> {
        let source = std::fs::read_to_string(path)?;
        Ok(ProgramFiles::new(path, source))
    }

    /// The program at `path`, whose text is `source` (already read); its
    /// config file is read if there is one.
    pub fn new(path: &Path, source: String) -> ProgramFiles {
        let config_path = config_path(path);
        let config = std::fs::read_to_string(&config_path)
            .ok()
            .map(|text| (config_path.display().to_string(), text));
        let name = path
            .file_stem()
            .map_or_else(|| "program".into(), |s| s.to_string_lossy().into_owned());
        ProgramFiles {
            name,
            script: (path.display().to_string(), source),
            config,
        }
    }

    /// A program given on the command line (`-e`): no file, no config.
    pub fn inline(source: String) -> ProgramFiles {
        ProgramFiles {
            name: "-e".into(),
            script: ("stdin".into(), source),
            config: None,
        }
    }

    fn files(&self) -> Files<'_> {
        Files {
            script: (&self.script.0, &self.script.1),
            config: self.config.as_ref().map(|(n, t)| (n.as_str(), t.as_str())),
        }
    }

    /// What its pragmas and config file say.
    pub fn config(&self) -> Result<Config, ConfigError> {
        let files = self.files();
        Config::read(files.script, files.config)
    }

    /// Its maps named as metrics, `prefix` first unless the program sets
    /// its own.
    pub fn naming(
        &self,
        config: &Config,
        script: &Script,
        maps: &[MapDecl],
        prefix: &str,
    ) -> Result<Naming, ConfigError> {
        Naming::new(script, maps, config, prefix, &self.files())
    }
}
