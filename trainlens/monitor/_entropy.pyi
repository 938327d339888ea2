FAST: int

def entropy(
    address: int,
    dtype: int,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    vocab: int,
    mask_address: int = 0,
    mask_kind: int = 0,
    force_scalar: bool = False,
) -> tuple[float, float]: ...
