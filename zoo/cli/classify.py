"""Classification: top-k ImageNet classes per image, over files, folders, globs, lists and videos.

    python -m zoo.run resnet50 photos/ --batch 8 --jsonl results.jsonl      # Ctrl-C, then --resume

Runs on zoo.pipeline: decoding and pre-processing overlap the model, results are printed and
written as they come (--jsonl one record a line; --json and --csv streamed too), memory stays
flat. A bad image is one ``error:`` line and an error record in the JSONL; the exit code is 1
when any failed.
"""
from __future__ import annotations

import csv
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from tqdm import tqdm

from zoo import pipeline, registry
from zoo.errors import UsageError
from zoo.files import (Inputs, OutputFile, cannot_write, check_distinct, check_new_file, close_all, json_text,
                       make_output_folder, refuse_inputs)
from zoo.sources import JsonlWriter, input_paths, open_source, read_records, read_twice, records_header


def add_arguments(parser):
    parser.add_argument("images", nargs="+", help="image files, folders, globs, .txt/.csv lists of paths, videos")
    parser.add_argument("--top-k", type=int, default=5)
    add_model_options(parser)
    parser.add_argument("--jsonl", metavar="PATH", help="write one JSON record per image as results come "
                        "(errors as {\"path\", \"error\"} records); --resume continues it")
    parser.add_argument("--json", metavar="PATH", help="also write the results as one JSON object {path: top-k}")
    parser.add_argument("--csv", metavar="PATH", help="also write the results as CSV, one row per image "
                        "(timm's columns: filename, index_0.., label_0.., prob_0..; index, label, prob for --top-k 1)")
    parser.add_argument("--overwrite", "--exist-ok", dest="overwrite", action="store_true",
                        help="replace --jsonl/--json/--csv files that exist (inputs are never replaced)")
    pipeline.add_arguments(parser, resume="skip the images --jsonl holds results for (needs --jsonl); "
                           "--json/--csv are written again with every result")


def check_arguments(args):
    from zoo.models.resnet import BATCH_BYTES_PER_PIXEL

    if args.top_k < 1 or args.top_k > 1000:
        raise UsageError(f"--top-k {args.top_k} is out of range: use 1 to 1000")
    model_options(args)
    pipeline.check_arguments(args)
    if args.resume and not args.jsonl:
        raise UsageError("--resume continues the records of --jsonl: pass --jsonl PATH (the file of the first run)")
    args.source = open_source(args.images, recursive=args.recursive, vid_stride=args.vid_stride,
                              stream_buffer=args.stream_buffer)
    pipeline.check_resumable(args.source, args.resume)
    crop = args.spec.preprocess["crop"]  # every image is resized and cropped to it
    pipeline.check_batch_memory(args.batch, args.source.total, (crop, crop), BATCH_BYTES_PER_PIXEL, args.dtype)
    inputs = Inputs([*args.images, *input_paths(args.source), args.weights])
    outputs = {f"--{option}": getattr(args, option) for option in ("jsonl", "json", "csv") if getattr(args, option)}
    check_distinct(outputs)
    for option, path in outputs.items():
        refuse_inputs(path, inputs, option)
        # --resume continues the JSONL and writes --json/--csv again from all its records
        check_new_file(path, option, args.overwrite or args.resume)
        make_output_folder(Path(path).parent, f"{option} {path}: its folder")
    args.header = records_header(args.spec.task, args.spec.name, {
        "--weights": registry.weights_identity(args.weights), "--dtype": args.dtype,
        "--top-k": min(args.top_k, args.num_classes or args.top_k),  # a head of 3 classes: top-5 and top-10 are top-3
        "--num-classes": args.num_classes}, folder=True)  # its records name the inputs as given
    # --json's object holds one entry a path (json.load keeps the last of a key given twice): an input read twice
    # would lose one of its results without a word
    if args.json and (twice := read_twice(args.source)):
        raise UsageError(f"--json {args.json}: {twice} is read twice (given twice, or also in a folder or list "
                         "given), and its JSON object holds one entry per path: give each input once, or pass --jsonl "
                         "or --csv instead (a row per input)")
    args.done = set()  # --resume: the items the record file holds results for, streamed (a damaged or foreign
    if args.resume and Path(args.jsonl).exists():  # file is refused here, before the model loads)
        records = read_records(args.jsonl, args.header)
        args.done = pipeline.resume_keys(once_each(records, args) if args.json else records)


def once_each(records: Iterable[dict], args) -> Iterator[dict]:
    """``records`` (an earlier run's, which --json is written again from), refused in one line at a second result
    for one input (a run without --json given it twice): --json would keep one of them."""
    keys = set()
    for record in records:
        if "error" not in record:  # dropped on --resume
            if (key := key_of(record)) in keys:
                raise UsageError(f"--json {args.json}: {args.jsonl} holds two results for {key} (a run given it "
                                 "twice), and the JSON object holds one entry per path: leave out --json, or run "
                                 "again into a new --jsonl with each input once")
            keys.add(key)
        yield record


def add_model_options(parser) -> None:
    """The options of zoo.load a classify command line sets (in-process and --ray)."""
    parser.add_argument("--num-classes", type=int, metavar="N", help="classes of the --weights checkpoint's head, "
                        "when not ImageNet's 1000 (a fine-tuned model; labels are then the class indices)")


def model_options(args) -> dict:
    """zoo.load's options from the command line (add_model_options)."""
    if args.num_classes is None:
        return {}
    if args.num_classes < 1:
        raise UsageError(f"--num-classes {args.num_classes}: give the number of classes of the checkpoint's head, 1 or more")
    return {"num_classes": args.num_classes}


def run(args, model) -> int:
    top_k = min(args.top_k, model.num_classes or args.top_k)
    with Outputs(args, top_k) as outputs:
        run = pipeline.Pipeline(
            args.source, lambda item: model.preprocess_image(item.load()), batch=args.batch, workers=args.workers,
            skip=(lambda item: pipeline.item_key(item) in args.done) if args.done else None,
            on_error=outputs.error, desc="classify",
            resume="the same command with --resume continues" if args.jsonl
            else "--resume needs the records of --jsonl PATH: pass it to the next run to make that one resumable")

        def process(batch):
            tops = model.top_classes(np.stack([ready.data for ready in batch]), top_k)
            for ready, top in zip(batch, tops):
                outputs.result(ready.item, top)
            if outputs.jsonl is not None:
                outputs.jsonl.sync()  # the batch's records on disk: a killed run loses at most the next batch

        run.run(process)
    run.refuse_nothing_read()
    written = [str(writer.path) for writer in (outputs.json, outputs.csv) if writer is not None and writer.count]
    if run.interrupted and written:  # whole files, which read as the run's
        fix = "the same command with --resume completes them" if args.jsonl else "run again with --overwrite for all"
        print(f"note: {' and '.join(written)} hold the images done before Ctrl-C only: {fix}", file=sys.stderr)
    print(f"{args.model}: {run.summary('classified')}", file=sys.stderr)
    return run.exit_code


class Outputs:
    """The run's result files: the JSONL records appended as they come, --json and --csv written as
    results come under a temporary name, renamed on close."""

    def __init__(self, args, top_k: int):
        self.args, self.top_k = args, top_k
        self.jsonl = (JsonlWriter(args.jsonl, resume=args.resume, overwrite=args.overwrite,
                                  keep=pipeline.without_errors, header=args.header) if args.jsonl else None)
        replace = args.overwrite or args.resume  # --resume writes them again from every record
        self.json = JsonObjectWriter(args.json, replace) if args.json else None
        self.csv = CsvWriter(args.csv, top_k, replace) if args.csv else None
        if self.jsonl is not None:
            for record in self.jsonl.kept_records():  # an earlier run's results, for --json/--csv
                self.tables(record)

    def result(self, item, top) -> None:
        record = {**item.meta, "top": [{"index": i, "label": label, "probability": p} for i, label, p in top]}
        tqdm.write(f"{key_of(record)}:" + "".join(f"\n  {p:7.2%}  {label} ({i})" for i, label, p in top))
        if self.jsonl is not None:
            self.jsonl.write(record)
        self.tables(record)

    def tables(self, record: dict) -> None:
        if self.json is not None:
            self.json.write(key_of(record), record["top"])
        if self.csv is not None:
            self.csv.write(key_of(record), record["top"])

    def error(self, item, message: str) -> None:
        if self.jsonl is not None:
            self.jsonl.write({**item.meta, "error": message})

    def __enter__(self):
        return self

    def __exit__(self, kind, error, trace):
        """Every finished result is kept, also on an error or a second Ctrl-C; a file with none is not written. Each
        file is closed, also after another's close failed (a full disk): no temporary file is left."""
        closes = [self.jsonl.close] if self.jsonl is not None else []
        for writer in (self.json, self.csv):
            if writer is not None:
                closes.append(writer.close if writer.count else writer.output.abort)
        close_all(closes, error)


def key_of(record: dict) -> str:
    """An image's key in --json and --csv: its path; a video frame's: path#frame."""
    return record["path"] if record.get("frame") is None else f"{record['path']}#{record['frame']}"


class StreamedFile:
    """A text file written as results come into an OutputFile, renamed by close(). A failed write (a full disk) ends
    the run (DiskRefused: the file cannot be whole) and drops the file."""

    def __init__(self, path: str | Path, replace: bool, newline: str | None = None):
        self.path = Path(path)
        self.output = OutputFile(path, replace, text=True, newline=newline)
        self.file = self.output.file
        self.count = 0

    def write(self, key: str, top: list[dict]) -> None:
        """The result of the image ``key``."""
        with self.refusal():
            self.add(key, top)
        self.count += 1

    def add(self, key: str, top: list[dict]) -> None:
        """The text of one result."""

    def finish(self) -> None:
        """What ends the file (a closing brace)."""

    @contextmanager
    def refusal(self):
        """The file's writes, inside: an OSError drops the file (its text buffer lost the bytes: never whole)."""
        try:
            yield
        except OSError as e:
            self.output.abort()
            raise cannot_write(self.path, e, ends_run=True) from None

    def close(self) -> None:
        if not self.file.closed:
            with self.refusal():
                self.finish()
            self.output.close()


class JsonObjectWriter(StreamedFile):
    """``json.dumps({path: top, ...}, indent=2)`` written one entry at a time: the same bytes, flat memory (a NaN
    probability, a model of broken weights', as null: valid JSON, zoo.files.json_text)."""

    def add(self, key: str, top: list[dict]) -> None:
        entry = json_text({key: top}, self.path, indent=2)[2:-2]  # the entry's lines inside the braces
        self.file.write(("{\n" if self.count == 0 else ",\n") + entry)

    def finish(self) -> None:
        self.file.write("\n}" if self.count else "{}")


class CsvWriter(StreamedFile):
    """timm inference.py's separate-column layout (--results-separate-col --include-index): filename, index_i,
    label_i, prob_i for rank i; top-1 as timm writes it, filename, index, label, prob (its ranks are numbered only
    when there are several)."""

    def __init__(self, path, k: int, replace: bool):
        super().__init__(path, replace, newline="")
        self.rows = csv.writer(self.file)
        ranks = [f"_{i}" for i in range(k)] if k > 1 else [""]
        self.rows.writerow(["filename", *(f"{field}{rank}" for field in ("index", "label", "prob") for rank in ranks)])

    def add(self, filename: str, top: list[dict]) -> None:
        self.rows.writerow([filename, *(t["index"] for t in top), *(t["label"] for t in top),
                            *(f"{t['probability']:.6g}" for t in top)])

