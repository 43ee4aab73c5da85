"""Every calibration/evaluation data format loads, matches the model's inputs, and bad input is one clear line."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from onnxlite import UsageError
from onnxlite.data import Dataset, load_data
from onnxlite.inputs import parse_input_spec

IMAGE = [parse_input_spec("pixels:float32[batch,1,8,8]")]
TEXT = [parse_input_spec("input_ids:int64[batch,seq]"), parse_input_spec("attention_mask:int64[batch,seq]"),
        parse_input_spec("token_type_ids:int64[batch,seq]")]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "a", "dog"]


@pytest.fixture(scope="module")
def digits():
    datasets = pytest.importorskip("sklearn.datasets")
    d = datasets.load_digits()
    return (d.images[:40] / 16.0).astype(np.float32)[:, None], d.target[:40].astype(np.int64)


def _all(dataset: Dataset, batch: int = 7) -> dict[str, np.ndarray]:
    parts = list(dataset.batches(batch))
    assert all(len(next(iter(p.values()))) <= batch for p in parts)
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def test_npz_with_labels(tmp_path, digits):
    images, labels = digits
    np.savez(tmp_path / "d.npz", pixels=images, labels=labels, extra=np.zeros(3))
    dataset = load_data(tmp_path / "d.npz", IMAGE)
    assert list(dataset.arrays) == ["pixels"]  # extras dropped: onnxruntime would refuse them
    np.testing.assert_array_equal(_all(dataset)["pixels"], images)
    np.testing.assert_array_equal(dataset.labels, labels)
    calib, held_out = dataset.split(0.25)
    assert len(calib) == 10 and len(held_out) == 30
    np.testing.assert_array_equal(held_out.labels, labels[10:])


def test_folder_of_npy_is_memory_mapped(tmp_path, digits):
    images, labels = digits
    np.save(tmp_path / "pixels.npy", images)
    np.save(tmp_path / "labels.npy", labels)
    dataset = load_data(tmp_path, IMAGE)
    assert isinstance(dataset.arrays["pixels"], np.memmap)
    np.testing.assert_array_equal(_all(dataset)["pixels"], images)
    np.testing.assert_array_equal(dataset.labels, labels)


def test_folder_of_npz_streams_file_by_file(tmp_path, digits):
    images, labels = digits
    for i, start in enumerate(range(0, 40, 15)):  # 15 + 15 + 10 samples
        np.savez(tmp_path / f"part{i}.npz", pixels=images[start:start + 15], labels=labels[start:start + 15])
    dataset = load_data(tmp_path, IMAGE)
    assert dataset.streamed and len(dataset) == 40
    np.testing.assert_array_equal(_all(dataset)["pixels"], images)
    np.testing.assert_array_equal(dataset.labels, labels)
    head, tail = dataset.split(0.5)
    assert tail.streamed and len(tail) == 20
    np.testing.assert_array_equal(_all(tail, 6)["pixels"], images[20:])
    np.testing.assert_array_equal(dataset.take(17).arrays["pixels"], images[:17])


def test_images_folder_normalized_and_laid_out(tmp_path, digits):
    Image = pytest.importorskip("PIL.Image")
    images, labels = digits
    for cls in range(2):
        (tmp_path / f"class{cls}").mkdir()
    for i, image in enumerate(images[:10]):
        pixels = (image[0] * 255).round().astype(np.uint8)
        Image.fromarray(pixels, mode="L").save(tmp_path / f"class{i % 2}" / f"{i:02d}.png")
    dataset = load_data(tmp_path, IMAGE, {"mean": "0.5", "std": "0.25"})
    got = _all(dataset)["pixels"]
    assert got.shape == (10, 1, 8, 8) and got.dtype == np.float32
    # files come class folder by class folder, sorted by name
    order = [i for cls in range(2) for i in range(10) if i % 2 == cls]
    expected = ((images[order] * 255).round() / 255 - 0.5) / 0.25
    np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_array_equal(dataset.labels, [0] * 5 + [1] * 5)

    # NHWC RGB at another size, resized by PIL: layout and channels come from the model's input
    nhwc = [parse_input_spec("image:uint8[batch,16,16,3]")]
    rgb = _all(load_data(tmp_path, nhwc))["image"]
    assert rgb.shape == (10, 16, 16, 3) and rgb.dtype == np.uint8
    np.testing.assert_array_equal(rgb[..., 0], rgb[..., 2])  # grey pictures converted to RGB


def test_a_flat_image_folder_carries_its_labels_in_labels_npy(tmp_path, digits):
    Image = pytest.importorskip("PIL.Image")
    images, labels = digits
    for i, image in enumerate(images[:6]):
        Image.fromarray((image[0] * 255).round().astype(np.uint8), mode="L").save(tmp_path / f"{i:02d}.png")
    np.save(tmp_path / "labels.npy", labels[:6])
    dataset = load_data(tmp_path, IMAGE)
    assert _all(dataset)["pixels"].shape == (6, 1, 8, 8)
    np.testing.assert_array_equal(dataset.labels, labels[:6])
    # Any other .npy beside the images is still a mix of kinds.
    np.save(tmp_path / "extra.npy", labels[:6])
    with pytest.raises(UsageError, match="mixes npy and image files"):
        load_data(tmp_path, IMAGE)


def test_text_with_a_tokenizer_folder(tmp_path):
    transformers = pytest.importorskip("transformers")
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    transformers.BertTokenizerFast(vocab=str(tmp_path / "vocab.txt")).save_pretrained(str(tmp_path / "tok"))
    (tmp_path / "lines.txt").write_text("the cat sat on the mat\n\na dog\nthe dog sat\n")
    dataset = load_data(tmp_path / "lines.txt", TEXT, {"tokenizer": str(tmp_path / "tok")})
    ids, mask, types = (dataset.arrays[k] for k in ("input_ids", "attention_mask", "token_type_ids"))
    assert ids.shape == (3, 8) and ids.dtype == np.int64  # [CLS] + 6 words + [SEP], blank line skipped
    assert mask.sum(1).tolist() == [8, 4, 5]  # real padding on the shorter lines
    assert ids[1].tolist() == [2, VOCAB.index("a"), VOCAB.index("dog"), 3, 0, 0, 0, 0]
    assert not types.any()

    capped = load_data(tmp_path / "lines.txt", TEXT,
                       {"tokenizer": str(tmp_path / "tok"), "max_length": "5", "padding": "max_length"})
    assert capped.arrays["input_ids"].shape == (3, 5)
    fixed = load_data(tmp_path / "lines.txt", [parse_input_spec("input_ids:int32[batch,12]")],
                      {"tokenizer": str(tmp_path / "tok")})
    assert fixed.arrays["input_ids"].shape == (3, 12) and fixed.arrays["input_ids"].dtype == np.int32

    with pytest.raises(UsageError, match="tokenizer=FOLDER"):
        load_data(tmp_path / "lines.txt", TEXT)


def test_python_reference_callable_and_iterable(tmp_path, digits):
    images, labels = digits
    np.save(tmp_path / "images.npy", images)
    np.save(tmp_path / "labels.npy", labels)
    (tmp_path / "feeds.py").write_text(textwrap.dedent("""
        import numpy as np
        from pathlib import Path
        HERE = Path(__file__).parent
        def feeds():
            images = np.load(HERE / "images.npy")
            labels = np.load(HERE / "labels.npy")
            for start in range(0, len(images), 16):
                yield {"pixels": images[start:start + 16], "labels": labels[start:start + 16]}
        AS_LIST = [{"pixels": np.load(HERE / "images.npy")[:5]}]
        NOT_FEEDS = [1, 2]
    """))
    dataset = load_data(f"{tmp_path / 'feeds.py'}:feeds", IMAGE)
    assert dataset.streamed and len(dataset) == 40
    np.testing.assert_array_equal(_all(dataset)["pixels"], images)
    np.testing.assert_array_equal(dataset.labels, labels)
    assert len(load_data(f"{tmp_path / 'feeds.py'}:AS_LIST", IMAGE)) == 5
    with pytest.raises(UsageError, match="item 1 is a int"):
        load_data(f"{tmp_path / 'feeds.py'}:NOT_FEEDS", IMAGE)


@pytest.mark.parametrize("arrays, needle", [
    ({"image": np.zeros((2, 1, 8, 8), np.float32)}, "no entry for input 'pixels' (found image)"),
    ({"pixels": np.zeros((2, 1, 8, 8), np.float64)}, "input 'pixels' is float64, the model expects float32"),
    ({"pixels": np.zeros((2, 8, 8), np.float32)}, "input 'pixels' has rank 3"),
    ({"pixels": np.zeros((2, 1, 8, 9), np.float32)}, "input 'pixels' has size 9 on axis 3, the model expects 8"),
    ({"pixels": np.zeros((0, 1, 8, 8), np.float32)}, "no samples"),
])
def test_mismatches_are_one_line_naming_the_input(tmp_path, arrays, needle):
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(UsageError) as caught:
        load_data(tmp_path / "bad.npz", IMAGE)
    message = str(caught.value)
    assert needle in message and "\n" not in message and str(tmp_path / "bad.npz") in message


def test_streamed_mismatch_is_found_before_use(tmp_path, digits):
    images, _ = digits
    np.savez(tmp_path / "a.npz", pixels=images[:5])
    np.savez(tmp_path / "b.npz", pixels=images[5:10].astype(np.float64))
    with pytest.raises(UsageError, match=r"chunk 2\): input 'pixels' is float64"):
        load_data(tmp_path, IMAGE)


@pytest.mark.parametrize("setup, needle", [
    (lambda p: None, "empty folder"),
    (lambda p: (p / "notes.md").write_text("x"), "empty folder"),
    (lambda p: (p / "x.npy").write_bytes(b"junk"), "not a readable .npy file"),
])
def test_bad_folders(tmp_path, setup, needle):
    folder = tmp_path / "data"
    folder.mkdir()
    setup(folder)
    with pytest.raises(UsageError, match=needle):
        load_data(folder, IMAGE)


def test_bad_paths_and_options(tmp_path, digits):
    with pytest.raises(UsageError, match="no such file or folder"):
        load_data(tmp_path / "missing.npz", IMAGE)
    (tmp_path / "data.csv").write_text("1,2")
    with pytest.raises(UsageError, match="unsupported data format"):
        load_data(tmp_path / "data.csv", IMAGE)
    np.savez(tmp_path / "d.npz", pixels=digits[0])
    with pytest.raises(UsageError, match="did you mean max_length"):
        load_data(tmp_path / "d.npz", IMAGE, {"max_lenght": "4"})
    with pytest.raises(UsageError, match="max_length=four: expected int"):
        load_data(tmp_path / "d.npz", IMAGE, {"max_length": "four"})
    # Every command spells option names with dashes or underscores alike.
    from onnxlite.data import parse_data_options

    assert parse_data_options({"max-length": "4"})["max_length"] == 4
    with pytest.raises(UsageError,
                       match=r"data option max-lenght: data has no such option \(valid: .*\); did you mean max_length"):
        parse_data_options({"max-lenght": "4"})
    with pytest.raises(UsageError, match="one input; this model has 3"):
        (tmp_path / "imgs").mkdir()
        pytest.importorskip("PIL.Image").new("L", (8, 8)).save(tmp_path / "imgs" / "a.png")
        load_data(tmp_path / "imgs", TEXT)


def test_pick_rows_takes_any_samples_on_each_inputs_own_axis():
    from onnxlite.data.dataset import concat_rows, pick_rows, take_rows

    feeds = {"x": np.arange(24, dtype=np.float32).reshape(6, 4),
             "state": np.arange(36, dtype=np.float32).reshape(2, 6, 3), "sr": np.array(16000)}
    axes = {"state": 1}
    picked = pick_rows(feeds, [4, 0, 2], axes)
    one_by_one = concat_rows([take_rows(feeds, i, i + 1, axes) for i in (4, 0, 2)], axes)
    assert picked.keys() == one_by_one.keys()
    for name in feeds:
        np.testing.assert_array_equal(picked[name], one_by_one[name])
    assert picked["state"].shape == (2, 3, 3) and picked["sr"] is feeds["sr"]
