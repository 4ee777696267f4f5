//! This project's `sdt list --json` reads the probes exactly as readelf
//! does: every note, its address, semaphore and argument specs.

mod common;

use std::process::Command;

use common::{fixture, run, Config, Elf};
use sdt_testing::sdt_binary;
use serde_json::Value;

#[test]
fn sdt_list_json_matches_readelf() {
    let path = fixture(Config::RELEASE);
    let elf = Elf::read(&path);
    let output = run(Command::new(sdt_binary())
        .args(["list", "--json"])
        .arg(&path));
    assert!(output.status.success(), "sdt list: {output:?}");
    let probes: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let probes = probes.as_array().expect("an array of probes");

    let mut sites = 0;
    for probe in probes {
        let provider = probe["provider"].as_str().unwrap();
        let name = probe["name"].as_str().unwrap();
        let notes = elf.notes_of(provider, name);
        let listed = probe["sites"].as_array().unwrap();
        assert_eq!(listed.len(), notes.len(), "sites of {provider}:{name}");
        for site in listed {
            let address = site["address"].as_u64().unwrap();
            let note = notes
                .iter()
                .find(|n| n.pc == address)
                .unwrap_or_else(|| panic!("{provider}:{name}: no note at {address:#x}"));
            let semaphore = site["semaphore_address"].as_u64().unwrap_or(0);
            assert_eq!(semaphore, note.semaphore, "{provider}:{name} semaphore");
            let specs: Vec<&str> = site["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|arg| arg["spec"].as_str().unwrap())
                .collect();
            assert_eq!(specs.join(" "), note.args, "{provider}:{name} arguments");
            sites += 1;
        }
    }
    assert_eq!(
        sites,
        elf.notes.len(),
        "sdt list and readelf count different sites"
    );

    let values = probes
        .iter()
        .find(|p| p["provider"] == "fixture" && p["name"] == "values")
        .expect("fixture:values listed");
    let args = values["sites"][0]["args"].as_array().unwrap();
    assert_eq!(args[0]["size"], 4);
    assert_eq!(args[0]["signed"], true);
}
