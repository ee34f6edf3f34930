"""python -m zoo.run MODEL INPUT... [options]: run a model on images. MODEL may be a checkpoint file
(``python -m zoo.run best.pt images/``): the file says which model and task it holds. ultralytics' form,
``python -m zoo.run predict model=yolo11n.pt source=bus.jpg``, runs as its ``yolo`` command
(zoo/cli/yolo_command.py)."""
from __future__ import annotations

import importlib
import sys

from zoo.errors import interrupted_exits

with interrupted_exits():  # Ctrl-C while MLX loads: 'interrupted', exit 130
    from zoo import devices, registry
    from zoo.cli import (ArgumentParser, add_model_arguments, guarded, model_name_from, model_option_as_name,
                         ray_run, task_module, yolo_command)


@guarded
def main(argv: list[str]) -> int:
    if yolo_command.is_yolo_command(argv):  # ultralytics' `yolo predict model=... source=...`
        return yolo_command.main(argv)
    argv = model_option_as_name(argv, "python -m zoo.run")
    name = model_name_from(argv, "python -m zoo.run")
    if name == "annotate":  # detect-then-segment: a workflow over two models, not a model name
        return importlib.import_module("zoo.cli.annotate").main(argv)
    if registry.is_weights_file(name):  # read once, before the options: the file decides the task
        spec, checkpoint = registry.identify(name)
        spec = registry.fitted_spec(spec, checkpoint)
    else:  # a family's name given a file (yolov8 --weights seg.pt) is the file's task and variant
        spec, checkpoint = registry.spec_for(name, weights_option(argv)), None
    if "--ray" in argv:  # Ray Data in place of the in-process loop: options of its own (zoo/cli/ray_run.py)
        return ray_run.main(spec, argv)
    task = task_module(spec.task)
    parser = ArgumentParser(prog="python -m zoo.run", description=f"{spec.name}: {spec.task}",
                            epilog=ray_run.RAY_NOTE if spec.task in ray_run.TASKS else None,
                            help_command=f"python -m zoo.run {name}")  # its options: the general help has no --out
    # this task's models (every model's help listed classifiers under lama's); python -m zoo.run --help lists all
    parser.add_argument("model", help=", ".join(registry.list_models(task=spec.task)))
    add_model_arguments(parser)
    task.add_arguments(parser)
    args = parser.parse_intermixed_args(argv)  # inputs after options too: lama --device cpu photo.jpg --mask m.png
    if checkpoint is not None:
        registry.refuse_second_checkpoint(name, args.weights)
        args.weights = name  # the task's checks read the file's classes, and never write over it
    args.spec = spec  # what the checks name the model by (a --jsonl header): the file's for a checkpoint
    devices.use(args.device)  # the checks may size work for the device (LaMa's memory bound)
    code = task.check_arguments(args)  # bad inputs fail before weights are read
    if code is not None:  # the task found nothing to do (e.g. every output already written)
        return code
    options = task.model_options(args) if hasattr(task, "model_options") else {}
    model = (registry.build(spec, checkpoint, args.dtype, **options) if checkpoint is not None else
             registry.load(args.model, weights=args.weights, dtype=args.dtype, device=args.device, **options))
    return task.run(args, model)


def weights_option(argv: list[str]) -> str | None:
    """--weights' value, before the task's parser exists."""
    peek = ArgumentParser(prog="python -m zoo.run", add_help=False)
    peek.add_argument("--weights")
    return peek.parse_known_args(argv)[0].weights


if __name__ == "__main__":
    sys.exit(main())
