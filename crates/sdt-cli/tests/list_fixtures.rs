//! `sdt list` on C fixtures compiled at test time: a PIE, a non-PIE and a
//! shared library with semaphores. Checked against what the fixtures know
//! (their probes, the inlined sites, the semaphore symbols) and against
//! readelf.

mod list_common;

use std::path::Path;
use std::process::Command;

use list_common::*;
use serde_json::Value;

fn site_counts(probes: &[Value]) -> Vec<usize> {
    probes
        .iter()
        .map(|p| p["sites"].as_array().unwrap().len())
        .collect()
}

/// The value of a symbol, from `readelf -sW`.
fn symbol(path: &Path, name: &str) -> u64 {
    let out = Command::new("readelf")
        .args(["-sW"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.last() == Some(&name)).then(|| u64::from_str_radix(fields[1], 16).unwrap())
        })
        .unwrap_or_else(|| panic!("no symbol {name} in {path:?}"))
}

#[test]
fn executables_list_their_probes_and_inlined_sites() {
    let Some(f) = fixtures("fixtures") else {
        return;
    };
    if !require(have("readelf"), "readelf (binutils)") {
        return;
    }
    for exe in [&f.pie, &f.nopie] {
        let probes = cross_check(exe);
        assert_eq!(
            probe_names(&probes),
            [
                "fixture:tick",
                "fixture:args",
                "fixture:noargs",
                "fixture:floating"
            ],
            "{exe:?}"
        );
        // tick() is inlined at three places: three sites, one probe.
        assert_eq!(site_counts(&probes), [3, 1, 1, 1], "{exe:?}");
        let args = probes[1]["sites"][0]["args"].as_array().unwrap();
        assert_eq!(args.len(), 3);
        // (short)-9 is folded into a constant.
        assert_eq!(args[2]["spec"], "-2@$-9");
        assert_eq!(args[2]["size"], 2);
        assert_eq!(args[2]["signed"], true);
        assert_eq!(
            args[2]["location"],
            serde_json::json!({"kind": "constant", "value": -9})
        );
        let floating = &probes[3]["sites"][0]["args"][0];
        assert_eq!(floating["float"], true);
        assert!(probes[2]["sites"][0]["args"].as_array().unwrap().is_empty());
        for probe in &probes {
            assert!(probe["sites"][0]["semaphore_address"].is_null());
        }
    }
    // Non-PIE: text is linked at 0x400000 and up, so address and file
    // offset differ; the PIE's text is mapped at its file offset.
    let nopie = list_json([&f.nopie]);
    let site = &nopie[0]["sites"][0];
    assert_ne!(site["address"], site["file_offset"]);
    assert!(site["address"].as_u64().unwrap() >= 0x40_0000);
}

#[test]
fn shared_library_semaphores() {
    let Some(f) = fixtures("fixtures") else {
        return;
    };
    if !require(have("readelf"), "readelf (binutils)") {
        return;
    }
    let probes = cross_check(&f.lib);
    assert_eq!(probe_names(&probes), ["libsem:request", "libsem:done"]);
    assert_eq!(site_counts(&probes), [1, 2]);
    let sections = readelf_sections(&f.lib);
    let probes_section = sections
        .iter()
        .find(|s| s.name == ".probes")
        .expect(".probes section");
    for (probe, symbol_name) in probes
        .iter()
        .zip(["libsem_request_semaphore", "libsem_done_semaphore"])
    {
        let expected = symbol(&f.lib, symbol_name);
        for site in probe["sites"].as_array().unwrap() {
            assert_eq!(
                site["semaphore_address"].as_u64(),
                Some(expected),
                "{symbol_name}"
            );
            assert_eq!(site["note"]["semaphore"].as_u64(), Some(expected));
            assert_eq!(
                site["semaphore_offset"].as_u64(),
                Some(probes_section.offset + expected - probes_section.addr)
            );
        }
    }
    // Two sites of one probe share a semaphore but not their arguments.
    let done = probes[1]["sites"].as_array().unwrap();
    assert_eq!(done[0]["semaphore_offset"], done[1]["semaphore_offset"]);
    assert_ne!(done[0]["address"], done[1]["address"]);
}

#[test]
fn text_and_verbose_output() {
    let Some(f) = fixtures("fixtures") else {
        return;
    };
    let out = run([Path::new("list"), &f.lib]);
    assert_success(&out, "sdt list");
    let shown = f.lib.display();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("{shown} libsem:request\n{shown} libsem:done\n")
    );

    let out = run([Path::new("list"), Path::new("-v"), &f.lib]);
    assert_success(&out, "sdt list -v");
    let text = String::from_utf8(out.stdout).unwrap();
    let probes = list_json([&f.lib]);
    let site = &probes[0]["sites"][0];
    let expect_site = format!(
        "  site {:#x} (file offset {:#x})\n    semaphore {:#x} (file offset {:#x})\n",
        site["address"].as_u64().unwrap(),
        site["file_offset"].as_u64().unwrap(),
        site["semaphore_address"].as_u64().unwrap(),
        site["semaphore_offset"].as_u64().unwrap(),
    );
    assert!(text.contains(&expect_site), "{text}");
    assert!(text.contains("    arg0: 4-byte signed "), "{text}");
    assert_eq!(text.matches("  site ").count(), 3, "{text}");
}

#[test]
fn patterns_select_probes() {
    let Some(f) = fixtures("fixtures") else {
        return;
    };
    let pie = f.pie.to_str().unwrap();
    let lib = f.lib.to_str().unwrap();
    let cases: [(&[&str], &[&str]); 6] = [
        (&[pie, "fixture:t*"], &["fixture:tick"]),
        (&[pie, "*:*args"], &["fixture:args", "fixture:noargs"]),
        (&[pie, "noarg?"], &["fixture:noargs"]),
        (
            &[pie, lib, "*:{tick,done}"],
            &["fixture:tick", "libsem:done"],
        ),
        (&[pie, "libsem:*"], &[]),
        (&[pie, "fixture:tick"], &["fixture:tick"]),
    ];
    for (args, expected) in cases {
        assert_eq!(probe_names(&list_json(args)), expected, "{args:?}");
    }
    // Without a `:` or glob character, the last word is a file, not a pattern.
    let out = run(["list", pie, "tick"]);
    assert!(!out.status.success());
}

#[test]
fn library_names_resolve_like_the_loader() {
    let Some(f) = fixtures("fixtures") else {
        return;
    };
    // The fixture library is not in the cache; libstdc++ is (it has probes).
    let out = run(["list", "libstdc++"]);
    assert_success(&out, "sdt list libstdc++");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("libstdc++.so.6 libstdcxx:throw"), "{text}");
    // A bare program name goes through PATH.
    let path = format!(
        "{}:{}",
        f.dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = sdt()
        .args(["list", "probes-pie"])
        .env("PATH", path)
        .output()
        .unwrap();
    assert_success(&out, "sdt list probes-pie");
    assert!(String::from_utf8_lossy(&out.stdout)
        .starts_with(&format!("{} fixture:tick", f.pie.display())));
}

/// The example in docs/json.md's `sdt list --json` section has exactly the
/// fields `sdt` emits, at every level, and each location example is one of
/// the documented kinds.
#[test]
fn schema_document_matches_the_output() {
    let Some(f) = fixtures("fixtures") else {
        return;
    };
    let doc = include_str!("../../../docs/json.md");
    let start = doc
        .find("## `sdt list --json`")
        .expect("docs/json.md documents sdt list --json");
    let doc = &doc[start..];
    let mut blocks = doc
        .split("```json\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap());
    let example: Value = serde_json::from_str(blocks.next().unwrap()).expect("example parses");
    let actual = list_json([&f.lib]);

    fn keys(value: &Value) -> Vec<String> {
        let mut keys: Vec<_> = value.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    }
    let (doc_probe, probe) = (&example[0], &actual[0]);
    assert_eq!(keys(doc_probe), keys(probe));
    let (doc_site, site) = (&doc_probe["sites"][0], &probe["sites"][0]);
    assert_eq!(keys(doc_site), keys(site));
    assert_eq!(keys(&doc_site["note"]), keys(&site["note"]));
    let (doc_arg, arg) = (&doc_site["args"][0], &site["args"][0]);
    assert_eq!(keys(doc_arg), keys(arg));

    // Location examples: one per line; compare with what each kind emits.
    let emitted: Vec<Value> = list_json([&f.pie, &f.lib])
        .iter()
        .flat_map(|p| p["sites"].as_array().unwrap().clone())
        .flat_map(|s| s["args"].as_array().unwrap().clone())
        .map(|a| a["location"].clone())
        .collect();
    for line in blocks.next().unwrap().lines() {
        let location: Value = serde_json::from_str(line).expect("location example parses");
        let kind = location["kind"].as_str().unwrap();
        assert!(["register", "memory", "symbol", "constant", "unsupported"].contains(&kind));
        if let Some(real) = emitted.iter().find(|l| l["kind"] == kind) {
            assert_eq!(keys(&location), keys(real), "{kind}");
        }
    }
}
