"""The globals a checkpoint's pickle may name, and how each may be used: one table.

An allow-list, not a deny-list: a deny-list has to know every way Python can run code
(``pkgutil.resolve_name``, ``pydoc.pipepager``, ``cProfile.run``, ``_operator`` spelled
without its ``operator`` alias, …) and misses the next one; this list names what torch,
numpy, Hugging Face, Lightning and torch.distributed.checkpoint really write, and any
other name is CKPT007. It is torch's ``weights_only`` unpickler's list
(``torch/_weights_only_unpickler.py``, ``_get_allowed_globals``, torch 2.13; a test
checks every name there is here) plus what real files written by those libraries hold
(the names were printed from files the tests write: ``torch.save`` of state dicts,
optimizers and numpy values, HF Trainer's ``rng_state.pth`` and ``training_args.bin``,
Lightning's ``.ckpt``, DCP's ``.metadata``).

Each name has a use, narrower than "may be imported":

- ``CALL``: may be called with any arguments the pickle builds (REDUCE, NEWOBJ, OBJ,
  INST): the tensor and array rebuild functions, containers, ``torch.device``;
- ``NEW``: may only be made without running its ``__init__`` (NEWOBJ, or copyreg's
  ``_reconstructor`` on ``object``) and given its ``__dict__`` by BUILD: the dataclasses
  HF and DCP pickle (calling ``TrainingArguments(...)`` would run its ``__post_init__``);
- ``ENUM``: may be called with one literal (an enum member looked up by value);
- ``REF``: may only be named (a storage type in torch's persistent ids, a dtype).
"""

from __future__ import annotations

CALL, NEW, ENUM, REF = "call", "new", "enum", "ref"

_TORCH_REBUILD = (
    "_rebuild_tensor",
    "_rebuild_tensor_v2",
    "_rebuild_tensor_v3",
    "_rebuild_parameter",
    "_rebuild_parameter_with_state",
    "_rebuild_qtensor",
    "_rebuild_sparse_tensor",
    "_rebuild_meta_tensor_no_storage",
    "_rebuild_nested_tensor",
    "_rebuild_wrapper_subclass",
    "_rebuild_device_tensor_from_numpy",
    "_rebuild_device_tensor_from_cpu_tensor",
)
_SCALARS = (
    "Double",
    "Float",
    "Half",
    "BFloat16",
    "Long",
    "Int",
    "Short",
    "Char",
    "Byte",
    "Bool",
)
#: torch's legacy typed storages (named in a persistent id, never called)
_STORAGES = (
    *(f"{s}Storage" for s in _SCALARS),
    "ComplexDoubleStorage",
    "ComplexFloatStorage",
    "QInt32Storage",
    "QInt8Storage",
    "QUInt2x4Storage",
    "QUInt4x2Storage",
    "QUInt8Storage",
)
_DTYPES = (
    *("float16", "float32", "float64", "bfloat16", "complex32", "complex64", "complex128"),
    *("bool", "qint8", "qint32", "quint8", "quint2x4", "quint4x2"),
    *("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"),
    *("float4_e2m1fn_x2", "bits1x8", "bits2x4", "bits4x2", "bits8", "bits16"),
    *(f"int{n}" for n in (1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64)),
    *(f"uint{n}" for n in (1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64)),
    # quantization schemes, memory formats and layouts are named the same way
    *("per_tensor_affine", "per_tensor_symmetric", "per_channel_affine"),
    *("per_channel_symmetric", "per_channel_affine_float_qparams"),
    *("contiguous_format", "channels_last", "channels_last_3d", "preserve_format"),
)
_DCP = "torch.distributed.checkpoint"

#: module -> {name: use}
ALLOWED: dict[str, dict[str, str]] = {
    "torch": {
        **{n: REF for n in _STORAGES},
        **{f"{s}Tensor": REF for s in _SCALARS},
        "Tensor": REF,
        **{n: REF for n in _DTYPES},
        "Size": CALL,
        "device": CALL,
    },
    "torch.cuda": {
        **{n: REF for n in _STORAGES[:12]},  # the scalar and complex ones
        **{f"{s}Tensor": REF for s in _SCALARS},
    },
    "torch.sparse": {f"{s}Tensor": REF for s in _SCALARS if s != "Bool"},
    "torch.cuda.sparse": {f"{s}Tensor": REF for s in _SCALARS if s != "Bool"},
    "torch.storage": {"TypedStorage": REF, "UntypedStorage": REF},
    "torch._utils": {n: CALL for n in _TORCH_REBUILD},
    "torch._tensor": {"_rebuild_from_type_v2": CALL},
    "torch.nn.parameter": {"Parameter": CALL},
    "torch.serialization": {"_get_layout": CALL},
    "torch.torch_version": {"TorchVersion": CALL},  # a str subclass: torch.__version__
    # torch.distributed.checkpoint's .metadata: its dataclasses and one enum
    f"{_DCP}.metadata": {
        **{
            n: NEW
            for n in (
                "Metadata",
                "TensorStorageMetadata",
                "BytesStorageMetadata",
                "ChunkStorageMetadata",
                "TensorProperties",
                "MetadataIndex",
                "StorageMeta",
            )
        },
        "_MEM_FORMAT_ENCODING": ENUM,
    },
    f"{_DCP}.filesystem": {"_StorageInfo": NEW},
    # numpy 1 (numpy.core) and 2 (numpy._core) spell the array rebuild differently
    "numpy": {"ndarray": REF, "dtype": CALL},
    "numpy.core.multiarray": {"_reconstruct": CALL, "scalar": CALL},
    "numpy._core.multiarray": {"_reconstruct": CALL, "scalar": CALL},
    "numpy.core.numeric": {"_frombuffer": CALL},  # protocol 5
    "numpy._core.numeric": {"_frombuffer": CALL},
    "collections": {"OrderedDict": CALL, "Counter": CALL, "defaultdict": CALL, "deque": CALL},
    # protocol 2 spells bytes as _codecs.encode(text, "latin1"); only that codec is let
    # through (a codec name is looked up, and imported, by the codec registry)
    "_codecs": {"encode": CALL},
    "copyreg": {"_reconstructor": CALL},  # protocol 0/1 objects; its arguments are checked
    "builtins": {
        **{
            n: CALL
            for n in (
                "set",
                "frozenset",
                "bytearray",
                "bytes",
                "complex",
                "slice",
                "range",
                "int",
                "float",
                "str",
                "bool",
                "tuple",
                "list",
                "dict",
            )
        },
        "object": REF,  # copyreg._reconstructor's base
        "Ellipsis": REF,
        "NotImplemented": REF,
    },
    # a parsed command line and a filesystem path: attributes and strings, no I/O on load
    # (Lightning's save_hyperparameters(args), Megatron's common.pt, DCP's StorageMeta)
    "argparse": {"Namespace": CALL},
    "pathlib": {
        n: CALL for n in ("Path", "PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath")
    },
    "datetime": {n: CALL for n in ("datetime", "date", "time", "timedelta", "timezone")},
    # Lightning's hyper-parameters, saved as its dict subclass in some versions
    "lightning.fabric.utilities.data": {"AttributeDict": CALL},
    "lightning_fabric.utilities.data": {"AttributeDict": CALL},
    "lightning.pytorch.utilities.parsing": {"AttributeDict": CALL},
    "pytorch_lightning.utilities.parsing": {"AttributeDict": CALL},
    # HF Trainer's training_args.bin (transformers 4.5x, accelerate 1.x)
    "transformers.training_args": {
        "TrainingArguments": NEW,
        "OptimizerNames": ENUM,
        "ParallelMode": ENUM,
    },
    "transformers.training_args_seq2seq": {"Seq2SeqTrainingArguments": NEW},
    "transformers.trainer_pt_utils": {"AcceleratorConfig": NEW},
    "transformers.trainer_utils": {
        n: ENUM
        for n in (
            "IntervalStrategy",
            "SaveStrategy",
            "HubStrategy",
            "SchedulerType",
            "EvaluationStrategy",
            "FSDPOption",
        )
    },
    "transformers.debug_utils": {"DebugOption": ENUM},
    "accelerate.state": {"PartialState": NEW},
    "accelerate.utils.dataclasses": {"DistributedType": ENUM},
}


def use_of(module: str, name: str) -> str | None:
    """How ``module.name`` may be used in a pickle (CALL / NEW / ENUM / REF), or None
    when it is not on the list. ``module`` and ``name`` as pickle would import them (after
    the Python 2 renames of protocols below 3). A dotted ``name`` (protocol 4 resolves it
    attribute by attribute) is never on it."""
    if "." in name:
        return None
    return ALLOWED.get(module, {}).get(name)
