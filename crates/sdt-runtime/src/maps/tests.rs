//! The expected texts are bpftrace 0.17's output for the same map
//! contents (see the differential tests for the live comparison).

use super::*;
use sdt_lang::types::{Ty, TypeRegistry, INT64};

struct TestEnv(TypeRegistry);

impl Env for TestEnv {
    fn registry(&self) -> &TypeRegistry {
        &self.0
    }
    fn probe_name(&self, id: u64) -> String {
        format!("probe{id}")
    }
    fn func_name(&self, id: u64) -> String {
        format!("func{id}")
    }
    fn symbol(&mut self, _: u32, _: u64) -> Option<super::super::value::Symbol> {
        None
    }
    fn stack(&mut self, _: u32) -> Vec<crate::RawFrame> {
        Vec::new()
    }
    fn user_name(&self, _: u32) -> Option<String> {
        None
    }
    fn time_format(&self, _: u32) -> &str {
        ""
    }
    fn wall_ns(&self, ns: u64) -> i128 {
        i128::from(ns)
    }
}

fn decl(name: &str, keys: Vec<Ty>, value: Ty) -> MapDecl {
    MapDecl {
        name: name.into(),
        keys,
        value,
        span: Default::default(),
        declared: None,
    }
}

fn int_key(v: i64) -> Vec<u8> {
    v.to_ne_bytes().to_vec()
}

fn words(values: &[i64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

fn print(d: &MapDecl, entries: Vec<Entry>, top: u64, div: u64) -> MapPrint {
    map_print(d, entries, top, div, &mut TestEnv(TypeRegistry::default()))
}

fn text(d: &MapDecl, entries: Vec<Entry>) -> String {
    sdt_output::text::map(&print(d, entries, 0, 1))
}

fn json(d: &MapDecl, entries: Vec<Entry>) -> Option<String> {
    sdt_output::json::map(&print(d, entries, 0, 1))
}

#[test]
fn plain_values_sort_by_value_and_keys_print_signed() {
    let d = decl("c", vec![INT64], INT64);
    let entries = [(3, 30), (1, 10), (-5, 5), (100, -7)]
        .into_iter()
        .map(|(k, v)| (int_key(k), vec![words(&[v])]))
        .collect();
    assert_eq!(
        text(&d, entries),
        "@c[100]: -7\n@c[-5]: 5\n@c[1]: 10\n@c[3]: 30\n"
    );
}

#[test]
fn counts_merge_cpus() {
    let d = decl("n", vec![Ty::Str { size: 8 }], Ty::Agg(Agg::Count));
    let entries = vec![
        (b"y\0\0\0\0\0\0\0".to_vec(), vec![words(&[1]), words(&[1])]),
        (b"x\0\0\0\0\0\0\0".to_vec(), vec![words(&[1]), words(&[0])]),
    ];
    assert_eq!(text(&d, entries.clone()), "@n[x]: 1\n@n[y]: 2\n");
    assert_eq!(
        json(&d, entries).unwrap(),
        "{\"type\": \"map\", \"data\": {\"@n\": {\"x\": 1, \"y\": 2}}}"
    );
}

#[test]
fn stats_print_as_a_record() {
    let st = decl("stats", vec![], Ty::Agg(Agg::Stats { signed: true }));
    let entries = vec![(int_key(0), vec![words(&[2, 21]), words(&[1, -50])])];
    assert_eq!(
        text(&st, entries.clone()),
        "@stats: { .count = 3, .average = -9, .total = -29 }\n"
    );
    assert_eq!(
        json(&st, entries).unwrap(),
        "{\"type\": \"stats\", \"data\": {\"@stats\": {\"count\": 3, \"average\": -9, \"total\": -29}}}"
    );
    let avg = decl("avgneg", vec![], Ty::Agg(Agg::Avg { signed: true }));
    let entries = vec![(int_key(0), vec![words(&[2, -21])])];
    assert_eq!(text(&avg, entries.clone()), "@avgneg: -10\n");
    assert_eq!(
        json(&avg, entries).unwrap(),
        "{\"type\": \"stats\", \"data\": {\"@avgneg\": -10}}"
    );
}

#[test]
fn hist_layout_matches_bpftrace() {
    let d = decl("h", vec![], Ty::Agg(Agg::Hist { bits: 0 }));
    let bucket = |i: i64, n: i64| (int_key(i), vec![words(&[n])]);
    // hist of 0, 1, 1, 2, 3, 4, 7, 8, 100, -1, -100.
    let entries = vec![
        bucket(1, 1),
        bucket(2, 2),
        bucket(3, 2),
        bucket(4, 2),
        bucket(5, 1),
        bucket(8, 1),
        bucket(0, 2),
    ];
    let want = "@h:\n\
(..., 0)               2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\
[0]                    1 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |\n\
[1]                    2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\
[2, 4)                 2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\
[4, 8)                 2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\
[8, 16)                1 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |\n\
[16, 32)               0 |                                                    |\n\
[32, 64)               0 |                                                    |\n\
[64, 128)              1 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |\n\n";
    assert_eq!(text(&d, entries.clone()), want);
    assert_eq!(
        json(&d, entries).unwrap(),
        "{\"type\": \"hist\", \"data\": {\"@h\": [{\"max\": -1, \"count\": 2},{\"min\": 0, \"max\": 0, \"count\": 1},\
         {\"min\": 1, \"max\": 1, \"count\": 2},{\"min\": 2, \"max\": 3, \"count\": 2},{\"min\": 4, \"max\": 7, \"count\": 2},\
         {\"min\": 8, \"max\": 15, \"count\": 1},{\"min\": 16, \"max\": 31, \"count\": 0},{\"min\": 32, \"max\": 63, \"count\": 0},\
         {\"min\": 64, \"max\": 127, \"count\": 1}]}}"
    );
    // Units, and buckets past 2G that bpftrace 0.17 folds into [2G, 4G).
    let big = vec![bucket(12, 1), bucket(22, 1), bucket(34, 2)];
    let got = text(&d, big);
    assert!(got.contains("[1K, 2K)               1 |"), "{got}");
    assert!(got.contains("[1M, 2M)               1 |"), "{got}");
    assert!(got.contains("[4G, 8G)               2 |"), "{got}");
}

#[test]
fn lhist_labels_and_overflow() {
    let d = decl(
        "odd",
        vec![],
        Ty::Agg(Agg::Lhist {
            min: 3,
            max: 20,
            step: 5,
        }),
    );
    let bucket = |i: i64, n: i64| (int_key(i), vec![words(&[n])]);
    // lhist(7, 3, 20, 5) and lhist(19, 3, 20, 5).
    let want = "@odd:\n\
[3, 8)                 1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\
[8, 13)                0 |                                                    |\n\
[13, 18)               0 |                                                    |\n\
[20, ...)              1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\n";
    assert_eq!(text(&d, vec![bucket(1, 1), bucket(4, 1)]), want);
    let k = decl(
        "k",
        vec![],
        Ty::Agg(Agg::Lhist {
            min: 0,
            max: 4096,
            step: 1024,
        }),
    );
    let got = text(&k, vec![bucket(1, 1), bucket(3, 1), bucket(5, 1)]);
    assert!(got.starts_with("@k:\n[0, 1K)  "), "{got}");
    assert!(got.contains("[4K, ...)  "), "{got}");
    assert_eq!(
        json(&d, vec![bucket(0, 1), bucket(4, 1)]).unwrap(),
        "{\"type\": \"hist\", \"data\": {\"@odd\": [{\"max\": 2, \"count\": 1},{\"min\": 3, \"max\": 7, \"count\": 0},\
         {\"min\": 8, \"max\": 12, \"count\": 0},{\"min\": 13, \"max\": 17, \"count\": 0},{\"min\": 20, \"count\": 1}]}}"
    );
}

#[test]
fn keyed_histograms_sort_by_total() {
    let d = decl(
        "h",
        vec![Ty::Str { size: 8 }],
        Ty::Agg(Agg::Hist { bits: 0 }),
    );
    let key = |s: &[u8], b: i64| {
        let mut k = s.to_vec();
        k.resize(8, 0);
        k.extend(b.to_ne_bytes());
        k
    };
    let entries = vec![
        (key(b"bb", 2), vec![words(&[2])]),
        (key(b"bb", 5), vec![words(&[1])]),
        (key(b"aa", 4), vec![words(&[1])]),
        (key(b"cc", 3), vec![words(&[4])]),
    ];
    let got = text(&d, entries);
    let headers: Vec<&str> = got.lines().filter(|l| l.starts_with('@')).collect();
    assert_eq!(headers, ["@h[aa]:", "@h[bb]:", "@h[cc]:"]);
}

#[test]
fn empty_maps_and_top_and_div() {
    let c = decl("c", vec![], Ty::Agg(Agg::Count));
    // bpftrace 0.26 prints nothing for a map without entries.
    assert_eq!(text(&c, vec![]), "");
    assert_eq!(json(&c, vec![]), None);
    let s = decl("s", vec![INT64], Ty::Agg(Agg::Stats { signed: true }));
    assert_eq!(text(&s, vec![]), "");
    assert_eq!(json(&s, vec![]), None);
    let m = decl("m", vec![INT64], INT64);
    assert_eq!(text(&m, vec![]), "");
    let entries: Vec<Entry> = (1..=5)
        .map(|k| (int_key(k), vec![words(&[k * 10])]))
        .collect();
    assert_eq!(
        sdt_output::text::map(&print(&m, entries, 3, 10)),
        "@m[3]: 3\n@m[4]: 4\n@m[5]: 5\n"
    );
}

#[test]
fn strings_and_tuples_sort_by_key() {
    let d = decl("strk", vec![Ty::Str { size: 4 }], Ty::Str { size: 4 });
    let e = |k: &[u8], v: &[u8]| {
        let mut key = k.to_vec();
        key.resize(8, 0);
        let mut value = v.to_vec();
        value.resize(8, 0);
        (key, vec![value])
    };
    let got = text(
        &d,
        vec![e(b"k2", b"zzz"), e(b"k1", b"aaa"), e(b"k3", b"mmm")],
    );
    assert_eq!(got, "@strk[k1]: aaa\n@strk[k2]: zzz\n@strk[k3]: mmm\n");
    let t = decl(
        "t",
        vec![],
        Ty::Tuple(vec![INT64, Ty::Str { size: 2 }, INT64]),
    );
    let mut value = words(&[1]);
    value.extend(b"a\0\0\0\0\0\0\0");
    value.extend(words(&[2]));
    assert_eq!(
        text(&t, vec![(int_key(0), vec![value.clone()])]),
        "@t: (1, a, 2)\n"
    );
    assert_eq!(
        json(&t, vec![(int_key(0), vec![value])]).unwrap(),
        "{\"type\": \"map\", \"data\": {\"@t\": [1,\"a\",2]}}"
    );
}

#[test]
fn snapshots_give_every_key_the_same_buckets_and_the_sums() {
    let d = decl(
        "h",
        vec![Ty::Str { size: 8 }],
        Ty::Agg(Agg::Hist { bits: 0 }),
    );
    let key = |s: &[u8], b: i64| {
        let mut k = s.to_vec();
        k.resize(8, 0);
        k.extend(b.to_ne_bytes());
        k
    };
    // @h["a"]: 5 and 6 on one CPU, 7 on another ([4, 8) is bucket 4);
    // @h["b"]: 100 ([64, 128) is bucket 8).
    let entries = vec![
        (key(b"a", 4), vec![words(&[2, 11]), words(&[1, 7])]),
        (key(b"b", 8), vec![words(&[1, 100]), words(&[0, 0])]),
    ];
    let snapshot = map_snapshot(&d, entries, &mut TestEnv(TypeRegistry::default()));
    // Rows sort by their total count, as they print: "b" first.
    assert_eq!(snapshot.sums, [100, 18]);
    for row in &snapshot.print.rows {
        let MapValue::Buckets(buckets) = &row.value else {
            panic!("{row:?}");
        };
        // From [0] up to [64, 128), for both keys; no bucket of negatives.
        assert_eq!(buckets.len(), 8, "{buckets:?}");
        assert_eq!(buckets[0].low, Some(0));
        assert_eq!(buckets[7].high, Some(128));
    }
    let lhist = decl(
        "l",
        vec![],
        Ty::Agg(Agg::Lhist {
            min: 0,
            max: 100,
            step: 10,
        }),
    );
    let one = vec![(int_key(3), vec![words(&[1, 25])])];
    let snapshot = map_snapshot(&lhist, one, &mut TestEnv(TypeRegistry::default()));
    let MapValue::Buckets(buckets) = &snapshot.print.rows[0].value else {
        panic!("not buckets");
    };
    // Below 0, ten steps, and 100 or more: all of them.
    assert_eq!(buckets.len(), 12);
    assert_eq!(snapshot.sums, [25]);
}

/// A time series: each CPU's value of an interval is (value, time set or
/// count, interval number); CPUs merge per interval, an earlier interval
/// that held the same bucket is what it was before, and the intervals
/// shown are the last `count` up to the latest of the map, each key's
/// from its first with a value.
#[test]
fn time_series_merge_cpus_per_interval() {
    let series = |how| {
        let d = decl(
            "t",
            vec![INT64],
            Ty::Agg(Agg::TSeries {
                interval_ns: 100,
                count: 3,
                how,
            }),
        );
        // Key, bucket (interval % 3), then each CPU's value.
        let entry = |key: i64, bucket: i64, cpus: &[[i64; 3]]| {
            let mut k = int_key(key);
            k.extend(int_key(bucket));
            (k, cpus.iter().map(|c| words(c)).collect::<Vec<_>>())
        };
        let entries = vec![
            // Key 1: interval 10 on two CPUs; interval 8, then 11 (its
            // bucket's latest) on one and an old 8 on the other.
            entry(1, 1, &[[5, 1_000, 10], [9, 2_000, 10]]),
            entry(1, 2, &[[4, 500, 8], [6, 3_000, 11]]),
            // Key 2: only interval 7, outside the last three (9..=11).
            entry(2, 1, &[[1, 100, 7], [0, 0, 0]]),
            // Key 3: interval 9 only.
            entry(3, 0, &[[-3, 50, 9], [0, 0, 0]]),
        ];
        let p = print(&d, entries, 0, 1);
        (p.rows.iter())
            .map(|r| match &r.value {
                MapValue::Series { points, .. } => (r.key[0].as_int(), points.clone()),
                other => panic!("{other:?}"),
            })
            .collect::<Vec<_>>()
    };
    // Last value: the later time wins within an interval.
    assert_eq!(
        series(TSeriesAgg::Last),
        [
            (3, vec![(900, Some(-3)), (1000, None), (1100, None)]),
            (1, vec![(1000, Some(9)), (1100, Some(6))]),
        ]
    );
    // Sum and average over the CPUs of the same interval (the second word
    // is then how many values each CPU added).
    assert_eq!(
        series(TSeriesAgg::Sum)[1].1,
        [(1000, Some(14)), (1100, Some(6))]
    );
    assert_eq!(series(TSeriesAgg::Avg)[1].1[0], (1000, Some(0)));
    assert_eq!(series(TSeriesAgg::Max)[1].1[0], (1000, Some(9)));
    assert_eq!(series(TSeriesAgg::Min)[1].1[0], (1000, Some(5)));
}
