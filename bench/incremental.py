"""Daily changes as versions on a parent, against a full rebuild each day: what a day costs.

    .venv/bin/python bench/incremental.py            # 2,000 shards, 10 days, local and fake-gcs-server
    .venv/bin/python bench/incremental.py --quick    # 100 shards, 3 days
    .venv/bin/python bench/incremental.py --stores local --days 5

A version of --shards shards of --samples-per-shard samples (payload --sample-bytes, made in the JVM,
keys '%010d' of a growing id, written key-sorted: repartitionByRange + sortWithinPartitions, so shards
hold key ranges) is written, validated and published as d00. Then, --days times, a day's change:
--new of the day's samples are new keys (ids after the last), --upsert are replaced (new payload),
--delete are removed. Each day is one harness case with three contenders, in one process run:

  incremental clustered   the day as one version dNN on the previous day's, in two commits: change=upsert
                          (the new and the replaced rows; mode overwrite), then change=delete (the
                          deleted keys alone; mode append, the same parent); validated and published
                          once. The upserts hit --ranges contiguous runs of keys and the deletes one
                          (a re-processed collection, a takedown of one source).
  incremental scattered   the same, the upserted and deleted keys uniform over the live keys.
  full rebuild            the clustered day's whole dataset written from scratch as its own version
                          dNN (no parent), validated and published. The scattered day has the same
                          size, so one full rebuild a day is the baseline of both.

Why two commits: a write's change is one of append|upsert|delete; the delete appends onto the
upsert's commit of the same unpublished version (the same parent), so a day is one published version.
New keys never cause a rewrite wherever they fall (they go into new shards); only replaced and
deleted keys do: every shard holding one is rewritten without it (copy-on-write), the rest referenced.

Per contender and day: job seconds (the writes only, Spark's job and the driver's commit), validation
seconds (validate_version of each new version: an incremental one opens only its own shards and proves
referenced ones from their version's report), bytes written (everything the day added under the root:
shards, sample index, manifest, shardindex.json, validation report, publish record), of which own
shards, the change's own bytes (new + upserted samples' tar bytes), shards rewritten and emptied. After
the last day, storage under each root before and after retention (retention.collect with
--keep-last, min_age 0, as `gc --keep-last N` runs): the last N days either way.

On fake-gcs-server the version has --gcs-shards shards and the run --gcs-days days (smaller: every
full rebuild commits and validates every shard through the emulator).

Samples are --sample-bytes (8 KiB: a small image) by default. A child's sample index holds only the
rows of what it wrote, layered over its ancestors' files (dataset/index_layers.py), so it grows with
the change; the manifest (each commit), the validation report and shardindex.json (each version) still
cover every shard, referenced ones too (~0.2-0.4 KB a shard each). With 1,000-byte samples
(--sample-bytes 1000) and 50 a shard those are about as large as the shards a day writes. Measured
2026-12-05 (local, 2,000 shards, 3 days): before layers, when each version rewrote the whole index
(0.53 MB a day for 100k samples), a day cost 2.08x its change; with them (0.02 MB a day) 1.86x.

Goal (the issue): a day's incremental bytes within 2x of the change's own bytes (judged on clustered
changes; the scattered figure shows what scattered changes cost under copy-on-write).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np  # noqa: E402
from harness import Benchmark, Case, Contender, Meter, Ratio, emulator, main, measure, start_spark

BUCKET = "bench-incremental"
SCENARIOS = ("clustered", "scattered")


def tar_bytes(sample_bytes: int) -> int:
    """One sample's bytes in a shard: a header and the payload padded to 512 (one field, `bin`)."""
    return 512 + -(-sample_bytes // 512) * 512


# -- the data ---------------------------------------------------------------------------


@dataclass
class Scenario:
    """The live keys (ids, sorted) and each one's generation (its payload's seed); a day's change."""

    name: str
    ids: np.ndarray
    gens: np.ndarray
    rng: np.random.Generator
    ranges: int
    next_id: int = 0
    change: dict[str, np.ndarray] = field(default_factory=dict)

    def plan_day(self, day: int, new: float, upsert: float, delete: float) -> None:
        """Pick the day's new, upserted and deleted ids (counts are fractions of the live keys)."""
        live = len(self.ids)
        n_new, n_up, n_del = (max(1, round(f * live)) for f in (new, upsert, delete))
        if self.name == "clustered":
            # --ranges runs of upserted keys and one run of deleted keys, disjoint, at random places
            runs = [n_up // self.ranges + (i < n_up % self.ranges) for i in range(self.ranges)] + [n_del]
            taken = np.zeros(live, bool)
            picked = []
            for length in runs:
                while True:
                    start = int(self.rng.integers(0, live - length))
                    if not taken[max(0, start - 1) : start + length + 1].any():
                        break
                taken[start : start + length] = True
                picked.append(np.arange(start, start + length))
            up_at, del_at = np.concatenate(picked[:-1]), picked[-1]
        else:
            chosen = self.rng.choice(live, n_up + n_del, replace=False)
            up_at, del_at = chosen[:n_up], chosen[n_up:]
        new_ids = np.arange(self.next_id, self.next_id + n_new, dtype=np.int64)
        self.change = {"new": new_ids, "upsert": np.sort(self.ids[up_at]), "delete": np.sort(self.ids[del_at]),
                       "up_at": up_at, "del_at": del_at, "day": np.array([day])}  # fmt: skip

    def apply(self) -> None:
        day = int(self.change["day"][0])
        self.gens[self.change["up_at"]] = day
        keep = np.ones(len(self.ids), bool)
        keep[self.change["del_at"]] = False
        new = self.change["new"]
        self.ids = np.concatenate([self.ids[keep], new])
        self.gens = np.concatenate([self.gens[keep], np.full(len(new), day, np.int32)])
        self.next_id += len(new)


def frame(spark: Any, ids: np.ndarray, gens: np.ndarray, sample_bytes: int) -> Any:
    """(__key__ '%010d' of id, bin = sha2(id-gen) hex repeated to sample_bytes), made in the JVM."""
    import pandas as pd

    rows = spark.createDataFrame(
        pd.DataFrame({"id": ids.astype(np.int64), "gen": gens.astype(np.int32)}), "id long, gen int"
    )
    return rows.selectExpr(
        "format_string('%010d', id) AS __key__",
        f"CAST(substr(repeat(sha2(concat_ws('-', id, gen), 256), {-(-sample_bytes // 64)}), 1, {sample_bytes}) AS BINARY) AS bin",
    )  # fmt: skip


def key_frame(spark: Any, ids: np.ndarray) -> Any:
    import pandas as pd

    rows = spark.createDataFrame(pd.DataFrame({"id": ids.astype(np.int64)}), "id long")
    return rows.selectExpr("format_string('%010d', id) AS __key__")


# -- storage --------------------------------------------------------------------------------


def stored_files(uri: str) -> dict[str, int]:
    """Every file under `uri` by its path relative to `uri`, and its size (local: a walk; gs://: the
    listing, recursively)."""
    if not uri.startswith("gs://"):
        return {os.path.relpath(os.path.join(r, n), uri): os.path.getsize(os.path.join(r, n))
                for r, _, ns in os.walk(uri) for n in ns}  # fmt: skip
    from spark_webdataset.storage import storage_for

    storage = storage_for(uri)
    files = dict(storage.list_sizes(uri))
    for directory in storage.list_dirs(uri):
        files.update({f"{directory}/{name}": size for name, size in stored_files(storage.join(uri, directory)).items()})
    return files


def stored_bytes(uri: str) -> int:
    return sum(stored_files(uri).values())


KINDS = ("shards", "sample index", "manifest", "validation", "shardindex.json", "other")


def kind(path: str) -> str:
    """What a file under a root is, by its name."""
    from spark_webdataset.dataset.tree import (
        MANIFEST_NAME,
        SAMPLE_INDEX_DIR,
        SHARD_INDEX_NAME,
        VALIDATION_NAME,
    )

    name = path.rsplit("/", 1)[-1]
    if name.endswith(".tar"):
        return "shards"
    if f"/{SAMPLE_INDEX_DIR}/" in f"/{path}":
        return "sample index"
    return {MANIFEST_NAME: "manifest", VALIDATION_NAME: "validation", SHARD_INDEX_NAME: "shardindex.json"}.get(
        name, "other"
    )


def written_by_kind(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Bytes of the files that are new or changed in size since `before` (a rewritten file counts whole)."""
    kinds = dict.fromkeys(KINDS, 0)
    for path, size in after.items():
        if before.get(path) != size:
            kinds[kind(path)] += size
    return kinds


@dataclass
class Written:
    """A write's timing and what it stored."""

    seconds: float = 0.0
    cpu: float = 0.0
    other: float = 0.0
    validate_s: float = 0.0
    versions: list[str] = field(default_factory=list)


def write_version(root: str, version: str, commits: list[tuple[Any, str | None]], spc: int, out: Written,
                  parent: str | None = None) -> None:  # fmt: skip
    """The commits ((DataFrame, change) each: the first overwrites, the others append; timed into
    `out`), then validation (timed apart) and publish (untimed)."""
    from spark_webdataset.dataset.publish import publish
    from spark_webdataset.dataset.validate import validate_version

    with Meter() as meter:
        for number, (df, change) in enumerate(commits):
            writer = df.write.format("webdataset").mode("append" if number else "overwrite")
            if change != "delete":
                writer = writer.option("maxSamplesPerShard", str(spc))
            if parent is not None:
                writer = writer.option("parent", parent).option("change", change)
            writer.save(f"{root}/versions/{version}")
    started = time.perf_counter()
    report = validate_version(f"{root}/versions/{version}")
    out.validate_s += time.perf_counter() - started
    assert report.ok, report.summary()
    publish(root, version)
    out.seconds, out.cpu = out.seconds + meter.seconds, out.cpu + meter.cpu
    out.other = max(out.other, meter.other)
    out.versions.append(version)


def day_record(root: str, before: dict[str, int], out: Written, change_bytes: int) -> dict[str, Any]:
    """What a contender's day added under its root, from the listing and its versions' manifests."""
    from spark_webdataset.dataset.layout import Dataset

    dataset = Dataset(root)
    shard_bytes, own, changes = 0, 0, []
    for version in out.versions:
        _, manifest = dataset.published(version)
        shard_bytes += sum(s.bytes for s in manifest.own_shards)
        own += len(manifest.own_shards)
        changes += manifest.run.get("changes", [])
        last = manifest
    by_kind = written_by_kind(before, stored_files(root))
    written = sum(by_kind.values())
    summed = {k: sum(c.get(k, 0) for c in changes) for k in ("added", "replaced", "deleted", "shards_rewritten",
                                                             "shards_emptied", "samples_copied")}  # fmt: skip
    return {
        "seconds": round(out.seconds, 4), "our_cpu_s": round(out.cpu, 3), "other_cpu_share": round(out.other, 3),
        "validate_s": round(out.validate_s, 3), "versions": out.versions, "bytes_written": written,
        "shard_bytes_written": shard_bytes, "other_bytes_written": written - shard_bytes, "written_by_kind": by_kind, "own_shards": own,
        "change_bytes": change_bytes, "samples": last.samples, "shards": len(last.shards), "dataset_bytes": last.bytes,
        **summed, "changes": changes,
    }  # fmt: skip


# -- the benchmark --------------------------------------------------------------------------


def run_store(
    spark: Any, store: str, base: str, args: argparse.Namespace
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The base version, then each day a case (incremental clustered and scattered, full rebuild); then
    retention. (cases, storage figures)."""
    from spark_webdataset.dataset.retention import RetentionPolicy, collect

    shards, days = (args.gcs_shards, args.gcs_days) if store == "gcs" else (args.shards, args.days)
    spc, size = args.samples_per_shard, args.sample_bytes
    count = shards * spc
    roots = {s: f"{base}/{store}-{s}" for s in SCENARIOS} | {"full": f"{base}/{store}-full"}
    seed = np.random.SeedSequence(args.seed)
    scenarios = {
        name: Scenario(name, np.arange(count, dtype=np.int64), np.zeros(count, np.int32),
                       np.random.default_rng(child), args.ranges, count)
        for name, child in zip(SCENARIOS, seed.spawn(len(SCENARIOS)))
    }  # fmt: skip

    def sorted_frame(ids: np.ndarray, gens: np.ndarray, partitions: int) -> Any:
        df = frame(spark, ids, gens, size)
        return (
            df.repartitionByRange(partitions, "__key__") if partitions > 1 else df.coalesce(1)
        ).sortWithinPartitions("__key__")

    started = time.perf_counter()
    for name in SCENARIOS:
        scenario = scenarios[name]
        write_version(
            roots[name], "d00", [(sorted_frame(scenario.ids, scenario.gens, args.partitions), None)], spc, Written()
        )
    base_record = day_record(roots["clustered"], {}, Written(versions=["d00"]), 0)
    print(f"{store}: base d00 {base_record['samples']:,} samples in {base_record['shards']:,} shards, "
          f"{base_record['dataset_bytes'] / 1e6:.1f} MB, written twice in {time.perf_counter() - started:.1f} s", flush=True)  # fmt: skip

    cases = []
    state: dict[str, Any] = {}
    for day in range(1, days + 1):
        for scenario in scenarios.values():
            scenario.plan_day(day, args.new, args.upsert, args.delete)

        def prepare(root: str) -> Any:
            return lambda: state.__setitem__(root, stored_files(root))

        def incremental(name: str) -> Any:
            def run() -> dict[str, Any]:
                scenario, root = scenarios[name], roots[name]
                change = scenario.change
                ids = np.concatenate([change["new"], change["upsert"]])
                gens = np.full(len(ids), day, np.int32)
                out = Written()
                commits = [
                    (sorted_frame(ids, gens, 1), "upsert"),
                    (key_frame(spark, change["delete"]).coalesce(1), "delete"),
                ]
                write_version(root, f"d{day:02d}", commits, spc, out, f"d{day - 1:02d}")
                record = day_record(root, state[root], out, len(ids) * tar_bytes(size))
                scenario.apply()
                return record

            return run

        def full() -> dict[str, Any]:
            scenario = scenarios["clustered"]  # already applied: the day's dataset
            out = Written()
            write_version(
                roots["full"],
                f"d{day:02d}",
                [(sorted_frame(scenario.ids, scenario.gens, args.partitions), None)],
                spc,
                out,
            )
            change = len(scenario.change["new"]) + len(scenario.change["upsert"])
            return day_record(roots["full"], state[roots["full"]], out, change * tar_bytes(size))

        contenders = {
            "incremental clustered": Contender(incremental("clustered"), prepare=prepare(roots["clustered"])),
            "incremental scattered": Contender(incremental("scattered"), prepare=prepare(roots["scattered"])),
            "full rebuild": Contender(full, prepare=prepare(roots["full"])),
        }
        ratios = [Ratio("incremental clustered", "full rebuild"), Ratio("incremental scattered", "full rebuild")]
        info = {"store": store, "day": day, "samples": len(scenarios["clustered"].ids),
                **{f"{k}_keys": len(v) for k, v in scenarios["clustered"].change.items() if k in ("new", "upsert", "delete")}}  # fmt: skip
        cases.append(measure(Case(f"{store} day {day}", contenders, ratios, unit="days", scale=1, info=info),
                             args, repeats=1, warmup=0))  # fmt: skip

    storage: dict[str, Any] = {}
    for name, root in roots.items():
        figures = {"before_gc": stored_bytes(root)}
        report = collect(root, RetentionPolicy(keep_last=args.keep_last, min_age_seconds=0))
        figures[f"keep_last_{args.keep_last}"] = stored_bytes(root)
        figures["kept"] = sorted(report.kept)
        storage[name] = figures
    storage["base_bytes"] = base_record["dataset_bytes"]
    return cases, storage


def flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--shards", type=int, default=2000, help="shards of the first version, local")
    add("--samples-per-shard", type=int, default=50, help="maxSamplesPerShard")
    add("--sample-bytes", type=int, default=8192, help="payload bytes a sample (one field; 8 KiB: a small image)")
    add("--days", type=int, default=10, help="days of changes, local")
    add("--new", type=float, default=0.01, help="new keys a day, a fraction of the live keys")
    add("--upsert", type=float, default=0.005, help="replaced keys a day")
    add("--delete", type=float, default=0.001, help="deleted keys a day")
    add("--ranges", type=int, default=2, help="clustered: contiguous runs of upserted keys a day (deletes: one run)")
    add("--keep-last", type=int, default=3, help="retention after the last day")
    add("--stores", default="local,gcs", help="local, gcs (fake-gcs-server), or both")
    add("--gcs-shards", type=int, default=500, help="shards of the first version on the emulator")
    add("--gcs-days", type=int, default=10, help="days on the emulator")
    add("--partitions", type=int, default=16, help="range partitions of a full write")
    add("--cores", type=int, default=2, help="local[N]")
    add("--seed", type=int, default=22)


def quick(args: argparse.Namespace) -> None:
    args.shards, args.days, args.gcs_shards, args.gcs_days = 100, 3, 100, 2


def run(args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    stores = [s for s in args.stores.split(",") if s]
    cases: list[dict[str, Any]] = []
    storage: dict[str, Any] = {}
    with emulator(BUCKET) if "gcs" in stores else contextlib.nullcontext():
        spark = start_spark(args.cores, os.path.join(workdir, "spark-local"), driver_memory="6g",
                            confs={"spark.sql.execution.arrow.pyspark.enabled": "true"})  # fmt: skip
        try:
            for store in stores:
                base = f"gs://{BUCKET}" if store == "gcs" else os.path.join(workdir, "data")
                store_cases, storage[store] = run_store(spark, store, base, args)
                cases += store_cases
        finally:
            spark.stop()
    return {"cases": cases, "storage": storage, "notes": notes(cases, storage, args)}


# -- the summary -------------------------------------------------------------------------------


def _rec(case: dict[str, Any], contender: str) -> dict[str, Any]:
    return case["contenders"][contender]["runs"][-1]


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f}"


def notes(cases: list[dict[str, Any]], storage: dict[str, Any], args: argparse.Namespace) -> list[str]:
    import io

    from harness import print_table

    lines = ["", "per day (MB = 10^6 B; 'x change' = bytes written / the change's own bytes, new + upserted "
             "samples' tar bytes; shards-only counts the tars alone; 'vs full' = incremental / full rebuild):"]  # fmt: skip
    goals = []
    for store in dict.fromkeys(c["store"] for c in cases):
        days = [c for c in cases if c["store"] == store]
        for name in SCENARIOS:
            rows, ratios = [], {"bytes": [], "change": [], "shards_change": [], "job": [], "validate": []}
            for case in days:
                inc, full = _rec(case, f"incremental {name}"), _rec(case, "full rebuild")
                r = {"bytes": inc["bytes_written"] / full["bytes_written"], "change": inc["bytes_written"] / inc["change_bytes"],
                     "shards_change": inc["shard_bytes_written"] / inc["change_bytes"], "job": inc["seconds"] / full["seconds"],
                     "validate": inc["validate_s"] / full["validate_s"]}  # fmt: skip
                for k, v in r.items():
                    ratios[k].append(v)
                rows.append([case["day"], _mb(inc["change_bytes"]), _mb(inc["bytes_written"]), _mb(full["bytes_written"]),
                             f"{r['bytes']:.3f}", f"{r['change']:.2f}", f"{r['shards_change']:.2f}",
                             f"{inc['shards_rewritten']}+{inc['shards_emptied']}", inc["own_shards"], full["own_shards"],
                             f"{inc['seconds']:.1f}/{full['seconds']:.1f}", f"{r['job']:.2f}",
                             f"{inc['validate_s']:.2f}/{full['validate_s']:.2f}", f"{r['validate']:.3f}"])  # fmt: skip
            mean = {k: float(np.mean(v)) for k, v in ratios.items()}
            rows.append(["mean", "", "", "", f"{mean['bytes']:.3f}", f"{mean['change']:.2f}", f"{mean['shards_change']:.2f}",
                         "", "", "", "", f"{mean['job']:.2f}", "", f"{mean['validate']:.3f}"])  # fmt: skip
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                print_table(["day", "change MB", "inc MB", "full MB", "vs full", "x change", "shards-only x",
                             "rewritten+emptied", "inc shards", "full shards", "job s inc/full", "vs full",
                             "validate s inc/full", "vs full"], rows, left=1)  # fmt: skip
            lines += [f"  {store} {name}:", *("    " + line for line in buffer.getvalue().splitlines())]
            for who in (f"incremental {name}", "full rebuild"):
                kinds = {k: np.mean([_rec(c, who)["written_by_kind"][k] for c in days]) for k in KINDS}
                lines.append(f"    {who}, written a day by kind (mean MB): "
                             + ", ".join(f"{k} {_mb(v)}" for k, v in kinds.items()))  # fmt: skip
            if name == "clustered":
                worst = max(ratios["change"])
                goals.append(f"  {store} clustered: a day writes {mean['change']:.2f}x the change's own bytes on average, "
                             f"{worst:.2f}x at worst (target <= 2x): {'met' if worst <= 2 else 'NOT met'}; shards alone "
                             f"{mean['shards_change']:.2f}x")  # fmt: skip
            else:
                goals.append(f"  {store} scattered: {mean['change']:.2f}x the change's bytes (no target: copy-on-write "
                             f"rewrites every touched shard)")  # fmt: skip
        figures = storage[store]
        k = args.keep_last
        lines.append(
            f"  {store} storage under each root after the last day (MB; base version {_mb(figures['base_bytes'])}):"
        )
        for name in (*SCENARIOS, "full"):
            f = figures[name]
            lines.append(f"    {name:<10} before gc {_mb(f['before_gc'])}, keep_last {k} {_mb(f[f'keep_last_{k}'])}"
                         f" (kept {', '.join(f['kept'])})")  # fmt: skip
        for name in SCENARIOS:
            lines.append(
                f"    {name} / full after keep_last {k}: {figures[name][f'keep_last_{k}'] / figures['full'][f'keep_last_{k}']:.3f}"
            )
    return [*lines, "goals:", *goals]


BENCH = Benchmark("incremental", __doc__, run, flags, quick, defaults={"repeats": 1, "warmup": 0})

if __name__ == "__main__":
    main(BENCH)
