//! Converts the embedded policy files (`policies/*.toml`) to JSON once, at build time: parsing
//! TOML cost ~0.3 ms of every `ralph sandbox exec` and `ralph run` start, JSON a tenth of it.
//! The TOML files stay the source (with their comments); unit tests check that each JSON
//! parses to exactly what its TOML does.

use std::error::Error;
use std::path::Path;

const FILES: [&str; 4] = [
    "read-only",
    "workspace-write",
    "full-access",
    "syscalls-allowed",
];

fn main() -> Result<(), Box<dyn Error>> {
    let out = std::env::var_os("OUT_DIR").ok_or("cargo sets OUT_DIR")?;
    for name in FILES {
        let src = Path::new("../policies").join(format!("{name}.toml"));
        println!("cargo:rerun-if-changed={}", src.display());
        let text = std::fs::read_to_string(&src).map_err(|e| format!("{}: {e}", src.display()))?;
        let value: toml::Value =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", src.display()))?;
        std::fs::write(
            Path::new(&out).join(format!("{name}.json")),
            serde_json::to_string(&value)?,
        )?;
    }
    Ok(())
}
