"""Detection: boxes, classes and scores per image or video frame, written as ultralytics' ``yolo predict``.

    python -m zoo.run yolov8 video.mp4 --save-txt --save-conf --save-crop --vid-stride 2 --batch 8 --stream

Inputs are anything zoo.sources opens (files, folders, globs, .txt/.csv lists, videos, a camera
index, stream URLs). Runs on zoo.pipeline (decoding overlaps the model, memory stays flat, Ctrl-C
keeps every finished output, --resume skips the images already annotated). In --out
(default runs/<task>/predict, predict2, ... as ultralytics: runs/detect, runs/segment, runs/pose):

    <name>.<suffix>            annotated image          <video stem>.mp4   annotated video, the source's rate
    labels/<name>.txt          --save-txt (YOLO format, --save-conf adds the score)
    crops/<class>/<name>.jpg   --save-crop              predictions.json   --save-json (COCO detections)
    mlx_zoo_run.json           the run's settings (model, weights, options that change results): --resume checks them

``<name>`` is the image's stem, ``<stem>_<frame>`` for a video frame (zoo.sources' unique names).
predictions.json is ultralytics' save_json: one list of {image_id, file_name, category_id, bbox [x, y, w, h],
score} for the run, which pycocotools' ``COCO.loadRes`` reads as written (coco_image_ids, coco_category_ids).
"""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from tqdm import tqdm

from zoo import pipeline, registry
from zoo.cli import runs_folder
from zoo.errors import UsageError, ZooError
from zoo.extras import require
from zoo.files import (Inputs, check_distinct, check_new_file, closing_all, increment_path, name_too_long,
                       lock_output_folder, make_output_folder, refuse_inputs)
from zoo.results import ResultFiles, output_name
from zoo.sources import (RUN_SETTINGS, Files, FrameSource, JsonListWriter, JsonlWriter, UniqueNames, apply_settings,
                         check_settings, input_paths, open_source, other_file, read_json_list, read_records,
                         records_header)
from zoo.weights.synthetic import parse_synthetic

PREDICTIONS = "predictions.json"  # --save-json's file in --out, ultralytics' name


def add_arguments(parser):
    parser.add_argument("images", nargs="+", help="image or video files, folders, globs, .txt/.csv lists, "
                        "a camera index (0), stream URLs (rtsp://...)")
    parser.add_argument("--conf", type=float, default=0.25, help="keep boxes scoring above this (default 0.25)")
    parser.add_argument("--iou", type=float, default=0.7, help="NMS IoU threshold (default 0.7)")
    parser.add_argument("--classes", help="only these classes: comma-separated names or ids, e.g. person,car")
    parser.add_argument("--agnostic-nms", action="store_true", help="NMS across classes instead of per class")
    parser.add_argument("--max-det", type=int, default=300, help="at most this many boxes per image (default 300)")
    parser.add_argument("--retina-masks", action="store_true", help="segmentation models: masks at the image's "
                        "size (default: the letterboxed input's, as ultralytics)")
    parser.add_argument("--imgsz", type=int, nargs="+", metavar="SIZE",
                        help="inference size: one value or height width, rounded up to multiples of 32 "
                             "(default: the size the checkpoint was trained at, 640 for the official ones)")
    parser.add_argument("--out", help="folder for the outputs (default: a new runs/<task>/predict, predict2, ... as "
                        "ultralytics: runs/detect, runs/segment, runs/pose; with --resume the latest of them)")
    parser.add_argument("--overwrite", "--exist-ok", dest="overwrite", action="store_true",
                        help="replace outputs that exist in --out (inputs are never replaced)")
    parser.add_argument("--save-json", action="store_true", help=f"also write <out>/{PREDICTIONS}: the run's "
                        "detections for pycocotools (image_id: a numeric file stem, else a running number; "
                        "category_id: COCO's ids for COCO's 80 classes, else class + 1)")
    parser.add_argument("--save-txt", action="store_true", help="also write <out>/labels/<name>.txt in the YOLO "
                        "label format (class xc yc w h, normalised)")
    parser.add_argument("--save-conf", action="store_true", help="with --save-txt: each line ends with the score")
    parser.add_argument("--save-crop", action="store_true", help="also write each box's crop as "
                        "<out>/crops/<class>/<name>.jpg")
    parser.add_argument("--jsonl", metavar="PATH", help="write one JSON record per image or frame as results come "
                        "(detections with ultralytics' keys; errors as {\"path\", \"error\"})")
    parser.add_argument("--stream", action="store_true", help="accepted for ultralytics' command line: results are "
                        "always written as they come, one batch in memory at a time")
    pipeline.add_arguments(
        parser, batch="frames of one video, or images of one size, give the same boxes; images of different sizes "
        "are letterboxed to one --imgsz square, as ultralytics batches them, which changes their boxes against one "
        "at a time", resume="skip the images whose annotated image exists in --out and the videos whose annotated "
        "video does")


def check_arguments(args):
    from zoo.models.yolov8 import (BATCH_BYTES_PER_PIXEL, check_imgsz, check_thresholds, class_names, default_imgsz,
                                   resolve_classes)

    check_thresholds(args.conf, args.iou, args.max_det)
    pipeline.check_arguments(args)
    if args.imgsz is not None and len(args.imgsz) > 2:
        raise UsageError(f"--imgsz takes one or two values (height width), got {len(args.imgsz)}")
    # the size the model runs at (run passes it on), as the settings hold it: omitted, the checkpoint's (args.spec
    # is fitted to the weights file's header), so --imgsz omitted, 640 and 640 640 are one setting for a 640 model
    default = check_imgsz(default_imgsz(args.spec))
    args.imgsz = default if args.imgsz is None else check_imgsz(args.imgsz[0] if len(args.imgsz) == 1 else
                                                                tuple(args.imgsz))
    # settings of earlier versions hold --imgsz null where it was omitted: the checkpoint's size
    args.imgsz_is_default = args.imgsz == default
    if args.save_conf and not args.save_txt:
        raise UsageError("--save-conf adds the score to the --save-txt labels: pass --save-txt too")
    if args.spec.task == "instance-segment" and (args.save_txt or args.jsonl):
        # before any work: found per image it failed every image, each after its annotated image was written
        require("cv2", f"{'--save-txt' if args.save_txt else '--jsonl'} of a segmentation model (its mask polygons)")
    class_ids = None  # --classes as ids, where the names are known before the model loads
    if args.classes is not None and args.spec.task != "pose" and (
            args.weights is None or parse_synthetic(str(args.weights)) is not None):
        # default and synthetic weights carry the COCO names: check now, before any download (a pose
        # model's one class, person in the official files and class0 in synthetic ones, is the model's to check)
        class_ids = resolve_classes(args.classes, dict(enumerate(class_names())))
    if args.out is None:
        runs = f"{runs_folder(args.spec.task)}/predict"
        args.out = latest_run(runs) if args.resume else increment_path(runs, exist_ok=args.overwrite)
    args.source = open_source(args.images, recursive=args.recursive, vid_stride=args.vid_stride,
                              stream_buffer=args.stream_buffer, outputs=[args.out])  # its images are no inputs
    pipeline.check_resumable(args.source, args.resume)
    pipeline.check_batch_memory(args.batch, args.source.total, args.imgsz, BATCH_BYTES_PER_PIXEL, args.dtype)
    inputs = Inputs([*args.images, *input_paths(args.source), args.weights], outputs=[args.out])
    out = lock_output_folder(args.out, "--out", inputs)
    for wanted, folder in ((args.save_txt, "labels"), (args.save_crop, "crops")):
        if wanted and (out / folder).exists() and not (out / folder).is_dir():  # else every image fails on it
            raise UsageError(f"{out / folder} is a file, where --save-{'txt' if folder == 'labels' else 'crop'} "
                             f"writes its {folder}: move it, or pass another --out")
    settings = refuse_inputs(out / RUN_SETTINGS, inputs, "output")
    check_distinct({"--out": out, "settings file": settings, **({"--jsonl": args.jsonl} if args.jsonl else {}),
                    **({"--save-json": out / PREDICTIONS} if args.save_json else {})})
    args.header = records_header(args.spec.task, args.spec.name, {
        "--weights": registry.weights_identity(args.weights), "--dtype": args.dtype, "--conf": args.conf,
        "--iou": args.iou, "--classes": classes_setting(args.classes, class_ids), "--agnostic-nms": args.agnostic_nms,
        "--max-det": args.max_det, "--imgsz": args.imgsz, "--retina-masks": args.retina_masks,
        "--batch": args.batch},  # a batch letterboxes images of different sizes to one square: other boxes
        given_as_unset={"--imgsz"} if args.imgsz_is_default else (), folder=True)  # records name inputs as given
    recorded = None  # --resume with --jsonl: the inputs it holds results for (resolved paths)
    if args.resume and args.jsonl and Path(args.jsonl).exists():
        # a damaged or foreign record file: refused before the model loads
        recorded = {key[0] for key in pipeline.resume_keys(read_records(args.jsonl, args.header))}
    elif args.resume and args.jsonl:
        # none: the run continued wrote none (its disk full at the first; a run that writes none leaves no file) or
        # had no --jsonl; its annotated images are done again, else their records would be missing from it
        recorded = set()
    # --resume: names, inputs (resolved) and input file names of those done before
    args.skip, args.done, args.done_files = set(), set(), set()
    outputs = list(fixed_outputs(args.source, out))
    args.image_ids = CocoImageIds({name: index for _, _, name, is_video, index in outputs if not is_video})
    # --jsonl in --out may be named as an output (out/bus.jpg): said so, not 'output out/bus.jpg exists'
    # once the record file was created there
    records = Path(args.jsonl).resolve() if args.jsonl else None
    records_in_out = records is not None and records.is_relative_to(Path(out).resolve())
    redone = 0  # --resume: outputs there whose records --jsonl lacks
    for given, path, name, is_video, _ in outputs:
        for planned in (path, *label_names(out, name, is_video, args)):
            if (too_long := name_too_long(planned)) is not None:
                raise ZooError(f"{given}: its output {too_long}: rename the input shorter")
        refuse_inputs(path, inputs, "output")
        extras = item_files(out, name, is_video, args)
        for written in (path, *extras) if records_in_out else ():
            check_distinct({"--jsonl": args.jsonl, "output": written})
        if args.resume and path.exists():
            if recorded is None or pipeline.input_identity(given) in recorded:
                args.skip.add(name)
                args.done.add(pipeline.input_identity(given))
                args.done_files.add(Path(given).name)
                continue
            if not Path(given).exists():  # done again it fails: the records of the run continued would be dropped
                raise UsageError(
                    f"--resume: {given} is not there, but its output {path} is (the run being continued read it "
                    "from elsewhere: a list's entry there from the current folder is read from there, a moved file); "
                    "run from the folder that run was started in, or put the file back; else run into a new --out")
            # written, but the run was killed before its record: done again, its own outputs replaced
            redone += 1
        else:
            check_new_file(path, "output", args.overwrite)
        for extra in extras:
            check_new_file(refuse_inputs(extra, inputs, "output"), "output", args.overwrite or args.resume)
    if redone and not Path(args.jsonl).exists():
        print(f"note: --resume: --jsonl {args.jsonl} is not there (the run continued wrote no record, or had no "
              f"--jsonl): the {redone} input(s) with outputs in {out} are done again, for their records",
              file=sys.stderr)
    names = {name for _, _, name, _, _ in outputs}
    records = args.jsonl and Path(args.jsonl).exists()  # its header says which options made the outputs skipped
    args.save_settings = check_settings(
        settings, args.header, lambda: other_outputs(out, names, {settings, *(Path(p) for p in (args.jsonl,) if p)}),
        args.overwrite, args.resume, 0 if records else len(args.skip),
        "pass another --out DIR" if args.resume else "pass another --out DIR, or --overwrite to replace its outputs",
        "--resume: ")
    if args.save_json:
        check_new_file(refuse_inputs(out / PREDICTIONS, inputs, "output"), "output", args.overwrite or args.resume)
        numbered, repeated = [], []  # running ids: stems that are no number; numbers another input has
        for given, _, name, is_video, _ in outputs:
            if name not in args.image_ids.ids:
                stem = Path(given).stem
                (repeated if not is_video and stem.isascii() and stem.isdigit() else numbered).append((given, name))
        if numbered:  # a ground truth with ids of its own matches none of them: AP 0 without a word
            example = numbered[0][1] + (", ..." if len(numbered) > 1 else "")
            print(f"note: --save-json: {len(numbered)} input(s) without a numeric file stem ({example}) get a running "
                  "image_id; map them to your ground truth's ids by file_name (a video's frames: and frame)",
                  file=sys.stderr)
            shared = Counter(Path(given).name for given, _ in numbered)
            if twice := [given for given, _ in numbered if shared[Path(given).name] > 1]:  # train/cat.png, val/cat.png
                print(f"note: --save-json: {len(twice)} of them share their file_name with another ({twice[0]}, "
                      f"{twice[1]}): their records tell them apart by image_id only, running in the inputs' order",
                      file=sys.stderr)
        if repeated:  # a/7.jpg and b/7.jpg (or 7.png and 007.png): one number, which a ground truth gives one image
            given, name = repeated[0]
            first = next(g for g, _, n, _, _ in outputs if args.image_ids.ids.get(n) == int(Path(given).stem))
            running = args.image_ids.known(name)  # None after a video: known once its frames are decoded
            running = f"a running image_id{f' ({running})' if running else ''}"
            if Path(given).resolve() == Path(first).resolve():  # a list naming it twice: loadRes refuses the id
                print(f"note: --save-json: {given} is given twice: its second records get {running}, not "
                      f"{int(Path(given).stem)}; give each image once", file=sys.stderr)
            else:
                print(f"note: --save-json: {len(repeated)} input(s) have a file stem's number another input has: "
                      f"{given} gets {running}, {first} the number {int(Path(given).stem)}; run them into separate "
                      "--out folders to give each its number", file=sys.stderr)
        if args.resume and (out / PREDICTIONS).exists():
            # a damaged file, or one whose ids this run gives to other images: refused before the model loads
            owners = {args.image_ids.known(name): Path(given).name for given, _, name, is_video, _ in outputs
                      if not is_video and args.image_ids.known(name) is not None}
            # a video not done gets its frames' ids as they are decoded, and the inputs after it theirs after those:
            # inputs after it done before (a video added since) hold ids its frames would take again
            video = next((i for i, (_, _, name, is_video, _) in enumerate(outputs)
                          if is_video and name not in args.skip), None)
            done_after = {Path(given).name for given, _, name, _, _ in outputs[video + 1:]
                          if name in args.skip} if video is not None else set()
            for record in read_json_list(out / PREDICTIONS):
                if record.get("file_name") in done_after:
                    raise UsageError(
                        f"--save-json on --resume: {out / PREDICTIONS} holds {record['file_name']} (image_id "
                        f"{record.get('image_id')}), done before {Path(outputs[video][0]).name} is, which comes "
                        "before it: the video's frames get their ids as they are decoded and would take the ids "
                        "its records hold; run again into a new --out, or continue without --save-json")
                owner = owners.get(record.get("image_id"), record.get("file_name"))
                if owner != record.get("file_name"):
                    raise UsageError(
                        f"--save-json on --resume: {out / PREDICTIONS} gives image_id {record['image_id']} to "
                        f"{record.get('file_name')}, which this run gives to {owner} (images were added or removed "
                        "before it since): the two runs' ids would mix and its records be dropped or taken for "
                        "another image's; run again into a new --out, or continue without --save-json")
        elif args.resume and args.skip:
            # the run being continued had no --save-json (its list is created before its first image):
            # a list of only the new images' records would miss the skipped ones without a word
            raise UsageError(f"--save-json on --resume: {out / PREDICTIONS} is not there, so the {len(args.skip)} "
                             f"input(s) done before would have no records in it: continue without --save-json, "
                             f"or run again into a new --out")
    if args.jsonl:
        check_new_file(refuse_inputs(args.jsonl, inputs, "--jsonl"), "--jsonl", args.overwrite or args.resume)
        make_output_folder(Path(args.jsonl).parent, f"--jsonl {args.jsonl}: its folder")
    make_output_folder(out, "--out")


def classes_setting(classes: str | None, ids: list[int] | None) -> str | None:
    """--classes as the run's settings hold it, one spelling for one filter (--resume takes person,car for
    car,person): the class ids, sorted, where the names are known before the model loads (``ids``); else
    the names (any case: as the model reads them) and ids given, deduplicated and sorted."""
    if classes is None:
        return None
    if ids is None:
        given = {int(c) if c.isdigit() else c.lower() for c in (c.strip() for c in classes.split(","))}
        ids = sorted(given, key=lambda c: (isinstance(c, str), c))
    return ",".join(map(str, ids))


def other_outputs(out: Path, names: set[str], own: set[Path]) -> str | None:
    """A file in --out this run does not make (an output of another image, or another run's), named; None if there
    is none. This run's: ``<name>.*``, ``labels/<name>.txt``, crops of ``<name>`` (video frames: ``<name>_<n>``),
    predictions.json and ``own``."""
    own = {p.resolve() for p in (*own, out / PREDICTIONS)}

    def ours(file: Path) -> bool:
        stem = file.stem.rstrip("0123456789") if file.parent.parent.name == "crops" else file.stem
        return file.resolve() in own or stem in names or stem.rpartition("_")[0] in names

    return other_file(out, ours)


def latest_run(base: str) -> Path:
    """The last of ultralytics' run folders (predict, predict2, ...): the one --resume continues."""
    base, latest, n = Path(base), None, 1
    while (candidate := base if n == 1 else base.with_name(f"{base.name}{n}")).exists() or n == 1:
        latest = candidate if candidate.exists() else latest
        n += 1
    if latest is None:
        raise UsageError(f"--resume continues a run, but there is no {base}: pass --out DIR of the run to continue")
    return latest


def fixed_outputs(source, out: Path):
    """(input, annotated output, name, is a video, index) for each image, video and camera of a source, named
    as the source's items will be (zoo.sources' unique names), without decoding anything. ``index``: the
    item's position in the source, None after a video or camera (its frames are counted by decoding)."""
    names, index = UniqueNames(), 0
    for part in getattr(source, "sources", [source]):
        if isinstance(part, Files):
            for path in part.paths:
                video = part.videos.get(path)
                name = names(path.stem, video=isinstance(video, FrameSource))
                if video is None:
                    yield str(path), out / output_name(path, name), name, False, index
                elif isinstance(video, FrameSource):  # else a video that does not open: a bad item
                    yield str(path), out / f"{name}.mp4", name, True, index
                index = None if isinstance(video, FrameSource) or index is None else index + 1
        elif isinstance(part, FrameSource):
            name = names(part.stem, video=True)
            yield part.path, out / f"{name}.mp4", name, True, index
            index = None


def label_names(out: Path, name: str, is_video: bool, args) -> list[Path]:
    """An input's label file (its crops are named alike, .jpg): a video's first frame's (a later frame's longer name
    is its own item's error)."""
    return [out / "labels" / f"{name}{'_1' * is_video}.txt"] if args.save_txt or args.save_crop else []


def item_files(out: Path, name: str, is_video: bool, args) -> list[Path]:
    """An image's own outputs besides the annotated one; for a video, those of its frames already there."""
    wanted = [(out / "labels", ".txt")] if args.save_txt else []
    if not is_video:
        return [folder / f"{name}{suffix}" for folder, suffix in wanted]
    return [p for folder, suffix in wanted for p in sorted(folder.glob(f"{name}_*{suffix}"))[:1]]


def run(args, model) -> int:
    from zoo.models.yolov8 import coco_category_ids
    from zoo.models.yolov8.predict import log_line, predict_batch, prediction_options

    options = prediction_options(model, args.conf, args.iou, args.classes, args.agnostic_nms, args.max_det,
                                 args.imgsz, args.retina_masks)
    out = Path(args.out)
    counts, speed = Counter(), Counter()
    replace = args.overwrite or args.resume  # outputs checked above: only a resumed item's own are there
    files = ResultFiles(out, save_txt=args.save_txt, save_conf=args.save_conf, save_crop=args.save_crop,
                        overwrite=replace, labels=replace, vid_stride=args.vid_stride)
    # --resume keeps the records of the images and videos it skips; the others are done again
    jsonl = JsonlWriter(args.jsonl, resume=args.resume, overwrite=args.overwrite, header=args.header,
                        keep=lambda r: "error" not in r and pipeline.input_identity(r["path"]) in args.done
                        ) if args.jsonl else None
    coco = None
    if args.save_json:
        category_ids = coco_category_ids(model.names)
        kept = args.image_ids.kept(args.skip, args.done_files)
        coco = JsonListWriter(out / PREDICTIONS, resume=args.resume, overwrite=args.overwrite, keep=kept)

    def skip(item) -> bool:
        return (item.stem if item.frame is not None else item.name) in args.skip

    def failed(item, message: str) -> None:
        if jsonl is not None:
            jsonl.write({**item.meta, "error": message})

    save_settings = args.save_settings

    def process(batch):
        nonlocal save_settings
        apply_settings(out / RUN_SETTINGS, args.header, save_settings, replace=args.overwrite)
        save_settings = None
        results = predict_batch(model, [ready.data for ready in batch], [ready.item for ready in batch], **options)
        if coco is not None:
            # the batch's records on disk before its annotated images, which --resume takes as done: a killed
            # run leaves no image done without its records (records of images not done are dropped on --resume)
            for ready, result in zip(batch, results):
                for record in result.to_coco(args.image_ids(ready.item), category_ids):
                    coco.write(record)
            coco.sync()
        for ready, result in zip(batch, results):
            item = ready.item
            files.write(result, item)
            if jsonl is not None:
                jsonl.write({**item.meta, "detections": result.summary(), "speed": result.speed})
            counts.update(result.names[int(c)] for c in result.boxes.cls)
            speed.update(result.speed)
            tqdm.write(log_line(item, result, args.vid_stride))
        if jsonl is not None:
            jsonl.sync()  # the batch's records on disk: a killed run loses at most the next batch

    run = pipeline.Pipeline(args.source, batch=args.batch, workers=args.workers, skip=skip if args.skip else None,
                            on_error=failed, desc="detect", resume="the same command with --resume continues")
    finished = False  # the run's items all came: a video left midway by an error is dropped, not kept as whole
    # the list before the last video, its frames' resume mark; a run without detections says so: []
    with closing_all(*([coco.close] if coco is not None else []),
                     lambda: files.close(complete=finished and not run.interrupted),
                     *([jsonl.close] if jsonl is not None else [])):
        run.run(process)
        finished = True
    run.refuse_nothing_read()
    if coco is not None and run.interrupted:  # a whole list, which COCOeval would score as the run's
        print(f"note: --save-json: {out / PREDICTIONS} holds the records of the images done before Ctrl-C only: "
              "COCOeval would count the others' objects as missed; --resume completes it", file=sys.stderr)
    print(run_summary(run, counts, speed, out, args), file=sys.stderr)
    return run.exit_code


class CocoImageIds:
    """ultralytics' save_json image_id of each item: the number a numeric stem is (``000000397133.jpg`` ->
    397133); else a running number, the largest of those plus the item's position in the run plus 1, so
    that no two images share one. ``positions``: the image files' unique names, known before the run, and
    their positions in the source (None where a video before them makes it unknown until decoded)."""

    def __init__(self, positions: dict[str, int | None]):
        self.ids: dict[str, int] = {}
        for name in positions:
            if name.isascii() and name.isdigit() and int(name) not in self.ids.values():
                self.ids[name] = int(name)  # '01' after '1' reads as the same number: it takes a running one
        self.after = max(self.ids.values(), default=0)
        self.running = {name: self.after + index + 1 for name, index in positions.items()
                        if name not in self.ids and index is not None}  # known before the run

    def known(self, name: str) -> int | None:
        """The id of the image file named ``name`` (its unique name) where known before the run, else None."""
        return self.ids.get(name, self.running.get(name))

    def __call__(self, item) -> int:
        if item.frame is None and item.name in self.ids:
            return self.ids[item.name]
        return self.after + item.index + 1

    def kept(self, skipped: set[str], done_files: set[str]):
        """--resume: whether an earlier run's record belongs to an image or video skipped now: by its id where
        the id is known before the run (a numeric stem, a running number of an image before any video),
        else by its file's name (an image after a video, a video's frames)."""
        known = {*self.ids.values(), *self.running.values()}
        done = {ids[name] for ids in (self.ids, self.running) for name in skipped if name in ids}
        return lambda r: r.get("image_id") in done or (
            r.get("image_id") not in known and r.get("file_name") in done_files)


def run_summary(run, counts: Counter, speed: Counter, out: Path, args) -> str:
    """ultralytics' end of a run: what was done, detections per class, speed per image, where the results are."""
    found = ", ".join(f"{c} {name}" for name, c in counts.most_common()) or "no detections"
    lines = [f"{args.model}: {run.summary('processed')}"]
    if run.done:  # a --resume with every input done before ran nothing: no detections nor times of its own to give
        lines += [f"Detections: {found}",
                  "Speed: " + ", ".join(f"{speed[k] / run.done:.1f}ms {k}" for k in ("preprocess", "inference",
                                                                                      "postprocess")) + " per image"]
    lines.append(f"Results saved to {out}")
    if args.save_txt:
        lines.append(f"Labels saved to {out / 'labels'}")
    return "\n".join(lines)
