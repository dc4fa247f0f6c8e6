"""Image sets, episodes and tokens of the one-shot task (docs/theory.md §6, paper Fig. 3)."""

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import rng_of
from PIL import Image

from bayes_attn.tasks import (
    DEFAULT_SPLIT,
    ImageSet,
    Tokenizer,
    make_episodes,
    read_digits,
    read_omniglot,
    read_omniglot_runs,
    split_by_class,
    split_by_group,
)

DATA = Path(__file__).resolve().parents[2] / "data/omniglot"  # the subset shipped with the project
SMALL = ("images_background_small1.zip", "images_background_small2.zip")


# ----- synthetic Omniglot zips ------------------------------------------------
def png(side: int, box: tuple[int, int, int, int]) -> bytes:
    """1-bit PNG, white background, black ink on rows box[0]:box[1], cols box[2]:box[3]."""
    a = np.ones((side, side), dtype=bool)
    a[box[0]:box[1], box[2]:box[3]] = False
    buf = io.BytesIO()
    Image.fromarray(a).convert("1").save(buf, format="PNG")
    return buf.getvalue()


def write_zip(path: Path, top: str, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{top}/", b"")
        for name, data in members.items():
            z.writestr(f"{top}/{name}", data)


@pytest.fixture
def fake_omniglot(tmp_path):
    """Two zips: AlphaA (2 characters × 3), Shared (1 × 2, in both zips), AlphaB (1 × 2)."""
    square = png(20, (0, 4, 0, 4))  # ink in the top-left 4x4 block
    dot = png(20, (0, 1, 0, 1))  # a single ink pixel
    z1 = {f"AlphaA/character0{c}/010{c}_0{d}.png": square for c in (1, 2) for d in (1, 2, 3)}
    z1 |= {f"Shared/character01/0300_0{d}.png": dot for d in (1, 2)}
    z2 = {f"Shared/character01/0300_0{d}.png": dot for d in (1, 2)}
    z2 |= {f"AlphaB/character01/0200_0{d}.png": square for d in (1, 2)}
    z2["__MACOSX/AlphaB/._junk.png"] = b"not a png"
    write_zip(tmp_path / "one.zip", "one", z1)
    write_zip(tmp_path / "two.zip", "two", z2)
    return tmp_path


def test_reader_counts_dedup_and_names(fake_omniglot):
    s = read_omniglot(fake_omniglot, files=("one.zip", "two.zip"), size=20)
    assert s.class_names == ("AlphaA/character01", "AlphaA/character02", "AlphaB/character01", "Shared/character01")
    assert s.groups == ("AlphaA", "AlphaA", "AlphaB", "Shared")
    assert len(s) == 10 and s.n_classes == 4 and s.duplicates == 2
    assert s.class_counts().tolist() == [3, 3, 2, 2]
    assert len(set(s.sources)) == len(s)
    assert s.images.dtype == np.float32 and s.images.shape == (10, 20, 20)
    # one zip only: no duplicates, Shared still complete
    one = read_omniglot(fake_omniglot, files="one.zip", size=20)
    assert one.duplicates == 0 and len(one) == 8


def test_reader_ink_convention_and_resizing(fake_omniglot):
    full = read_omniglot(fake_omniglot, files=("one.zip", "two.zip"), size=20)
    sq = full.images[full.classes == 0][0]
    assert np.all(sq[:4, :4] == 1.0) and sq.sum() == 16.0  # ink 1, background 0
    small = read_omniglot(fake_omniglot, files=("one.zip", "two.zip"), size=10)
    sq = small.images[small.classes == 0][0]
    assert np.all(sq[:2, :2] == 1.0) and sq.sum() == pytest.approx(4.0)
    dot = small.images[small.classes == 3][0]
    assert dot[0, 0] == pytest.approx(0.25) and dot.sum() == pytest.approx(0.25)  # box filter averages 2x2


def test_reader_errors_name_the_argument(fake_omniglot, tmp_path):
    with pytest.raises(FileNotFoundError, match="data_dir"):
        read_omniglot(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"missing\.zip.*one\.zip") as err:
        read_omniglot(fake_omniglot, files=("one.zip", "missing.zip"))
    assert "files" in str(err.value)
    with pytest.raises(FileNotFoundError, match="all_runs.zip"):
        read_omniglot_runs(fake_omniglot)
    with pytest.raises(ValueError, match="size"):
        read_omniglot(fake_omniglot, files=("one.zip",), size=0)
    with pytest.raises(ValueError, match="files"):
        read_omniglot(fake_omniglot, files=())
    (fake_omniglot / "bad.zip").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="bad.zip"):
        read_omniglot(fake_omniglot, files=("bad.zip",))


def test_imageset_subset_rotations_and_splits(fake_omniglot):
    s = read_omniglot(fake_omniglot, files=("one.zip", "two.zip"), size=20)
    sub = s.subset(["AlphaA"])
    assert sub.class_names == ("AlphaA/character01", "AlphaA/character02") and len(sub) == 6
    assert s.subset([3]).class_names == ("Shared/character01",)
    with pytest.raises(ValueError, match="unknown groups"):
        s.subset(["Nope"])
    with pytest.raises(ValueError, match="selection"):
        s.subset([0, 7])
    r = s.with_rotations()
    assert r.n_classes == 16 and len(r) == 40
    assert r.class_names[4] == "AlphaA/character01@90" and r.groups[4] == "AlphaA"
    np.testing.assert_array_equal(r.images[r.classes == 4][0], np.rot90(s.images[s.classes == 0][0]))
    m = r.with_mirrors()  # a mirrored class is a new label, never its source's
    assert m.n_classes == 32 and len(m) == 80 and m.class_names[20] == "AlphaA/character01@90~m"
    assert m.groups[20] == "AlphaA" and m.class_names[:16] == r.class_names
    np.testing.assert_array_equal(m.images[m.classes == 20], r.images[r.classes == 4][:, :, ::-1])
    assert not np.array_equal(m.images[m.classes == 20], m.images[m.classes == 4])
    with pytest.raises(ValueError, match="already holds mirrored"):
        m.with_mirrors()
    parts = split_by_group(r, {"a": ["AlphaA"], "b": ["AlphaB", "Shared"]})
    assert set(parts["a"].class_names).isdisjoint(parts["b"].class_names)
    assert parts["a"].n_classes == 8 and parts["b"].n_classes == 8
    with pytest.raises(ValueError, match="unknown group"):
        split_by_group(s, {"a": ["AlphaC"]})
    with pytest.raises(ValueError, match="used twice"):
        split_by_group(s, {"a": ["AlphaA"], "b": ["AlphaA"]})
    c1 = split_by_class(s, {"x": 0.5, "y": 0.5}, seed=3)
    c2 = split_by_class(s, {"x": 0.5, "y": 0.5}, seed=3)
    assert c1["x"].class_names == c2["x"].class_names
    assert set(c1["x"].class_names).isdisjoint(c1["y"].class_names)
    assert c1["x"].n_classes + c1["y"].n_classes == 4
    with pytest.raises(ValueError, match="fractions"):
        split_by_class(s, {"x": 0.5, "y": 0.4}, seed=0)


# ----- the real Omniglot files ------------------------------------------------
def test_the_omniglot_subset_ships_with_the_project():
    for f in (*SMALL, "all_runs.zip", "LICENSE", "README.md"):
        assert (DATA / f).is_file(), f"{f} is missing from {DATA}"
    assert "MIT" in (DATA / "LICENSE").read_text()


@pytest.fixture(scope="module")
def omniglot():
    return read_omniglot(DATA, SMALL, size=32)


def test_real_omniglot_counts(omniglot):
    assert omniglot.n_classes == 242 and len(omniglot.group_names) == 8
    assert len(omniglot) == 4840 and omniglot.duplicates == 1000
    assert np.all(omniglot.class_counts() == 20)
    assert omniglot.images.shape == (4840, 32, 32) and omniglot.images.dtype == np.float32
    assert 0.0 <= omniglot.images.min() and omniglot.images.max() <= 1.0
    assert 0.02 < omniglot.images.mean() < 0.3  # ink is the minority: ink = 1 convention


def test_real_default_split(omniglot):
    parts = split_by_group(omniglot)
    assert set(parts) == {"gd_train", "theory_train", "test"}
    names = [set(p.class_names) for p in parts.values()]
    assert sum(map(len, names)) == 242 and len(set().union(*names)) == 242  # disjoint, complete
    for key, p in parts.items():
        assert p.group_names == tuple(sorted(DEFAULT_SPLIT[key]))
    assert parts["theory_train"].n_classes >= 20 and parts["test"].n_classes >= 20


def test_real_runs():
    runs = read_omniglot_runs(DATA)
    assert runs.n_classes == 400 and len(runs) == 800 and len(runs.group_names) == 20
    assert np.all(runs.class_counts() == 2)
    assert runs.class_names[0] == "run01/class01"
    first = runs.sources[:2]
    assert first[0] == "run01/training/class01.png" and first[1].startswith("run01/test/item")
    assert len(set(runs.sources)) == 800
    ep = make_episodes(runs, 40, seed=0, within_group=True)
    g = np.array(runs.groups)
    assert np.all(g[ep.classes[:, 0]] == g[ep.classes[:, 1]])


def test_split_classes_never_leak_into_other_episodes(omniglot):
    parts = split_by_group(omniglot)
    used = {k: {p.class_names[c] for c in make_episodes(p, 400, seed=1).classes.ravel()} for k, p in parts.items()}
    assert used["gd_train"].isdisjoint(used["test"]) and used["gd_train"].isdisjoint(used["theory_train"])
    assert used["theory_train"].isdisjoint(used["test"])
    assert used["test"] <= set(parts["test"].class_names)


# ----- episodes ---------------------------------------------------------------
@pytest.fixture(scope="module")
def toy() -> ImageSet:
    """6 classes × 4 drawings of random 16×16 images, two groups."""
    rng = rng_of(0)
    return ImageSet(
        images=rng.random((24, 16, 16)).astype(np.float32),
        classes=np.repeat(np.arange(6), 4),
        class_names=tuple(f"g{c // 3}/c{c}" for c in range(6)),
        groups=tuple(f"g{c // 3}" for c in range(6)),
    )


def test_episodes_structure(toy):
    ep = make_episodes(toy, 200, seed=5)
    assert ep.images.shape == (200, 3, 16, 16) and ep.classes.shape == (200, 3) and ep.y.shape == (200,)
    assert np.sum(ep.y == 1) == 100 and np.sum(ep.y == -1) == 100
    assert np.all(ep.classes[:, 0] != ep.classes[:, 1])
    match0 = ep.classes[:, 2] == ep.classes[:, 0]
    match1 = ep.classes[:, 2] == ep.classes[:, 1]
    assert np.all(match0 == (ep.y == 1)) and np.all(match1 == (ep.y == -1))
    same_support = np.where(ep.y == 1, ep.indices[:, 0], ep.indices[:, 1])
    assert np.all(same_support != ep.indices[:, 2])  # a different drawing
    np.testing.assert_array_equal(toy.classes[ep.indices], ep.classes)
    np.testing.assert_array_equal(toy.images[ep.indices], ep.images)
    assert len(set(map(tuple, ep.classes[:, :2]))) > 15  # many class pairs, both orders


def test_episodes_deterministic_and_shift(toy):
    a, b, c = (make_episodes(toy, 20, seed=s) for s in (1, 1, 2))
    np.testing.assert_array_equal(a.images, b.images)
    np.testing.assert_array_equal(a.y, b.y)
    assert not np.array_equal(a.indices, c.indices)
    sh = make_episodes(toy, 20, seed=1, shift=2)
    np.testing.assert_array_equal(sh.indices, a.indices)
    assert not np.array_equal(sh.images, a.images)
    for img, src in zip(sh.images.reshape(-1, 16, 16)[:10], a.images.reshape(-1, 16, 16)[:10], strict=True):
        pad = np.pad(src, 2)
        crops = [pad[2 - dy:18 - dy, 2 - dx:18 - dx] for dy in range(-2, 3) for dx in range(-2, 3)]
        assert any(np.array_equal(img, cr) for cr in crops)  # a zero-padded translation by <= 2 px


def test_episodes_within_group_and_errors(toy):
    ep = make_episodes(toy, 50 * 2, seed=0, within_group=True)
    g = np.array(toy.groups)
    assert np.all(g[ep.classes[:, 0]] == g[ep.classes[:, 1]])
    with pytest.raises(ValueError, match="n must be even"):
        make_episodes(toy, 7, seed=0)
    with pytest.raises(ValueError, match="shift"):
        make_episodes(toy, 8, seed=0, shift=16)
    with pytest.raises(ValueError, match="at least 2 classes"):
        make_episodes(toy.subset([0]), 8, seed=0)
    single = ImageSet(toy.images[:5], np.array([0, 0, 0, 0, 1]), ("a", "b"), ("g", "g"))
    with pytest.raises(ValueError, match="at least 2 drawings"):
        make_episodes(single, 8, seed=0)


# ----- tokens -----------------------------------------------------------------
def test_tokenizer_shapes_and_determinism():
    rng = rng_of(0)
    images = rng.random((5, 3, 32, 32)).astype(np.float32)
    x1 = Tokenizer()(images)
    assert x1.shape == (5, 48, 64) and x1.dtype == np.float64 and Tokenizer().N0 == 64
    t3 = Tokenizer(channels=3)
    assert t3(images).shape == (5, 48, 192) and t3.N0 == 192
    np.testing.assert_array_equal(Tokenizer(seed=4)(images), Tokenizer(seed=4)(images))
    assert not np.allclose(Tokenizer(seed=4)(images), Tokenizer(seed=5)(images))
    with pytest.raises(ValueError, match="images"):
        Tokenizer()(images[:, :2])
    with pytest.raises(ValueError, match="multiple of patch"):
        Tokenizer(size=30)
    with pytest.raises(ValueError, match="label_scale"):
        Tokenizer(label_scale=-1.0)


def test_tokenizer_parts():
    rng = rng_of(1)
    images = rng.random((4, 3, 32, 32))
    tok = Tokenizer(channels=3, label_scale=0.7, seed=2)
    x0 = tok(images)
    # patches are row-major, image by image: token 16 + 5 = image 1, patch row 1, col 1
    np.testing.assert_array_equal(tok.patches(images)[2, 21, :64], images[2, 1, 8:16, 8:16].ravel())
    labels = tok.token_labels
    assert labels.tolist() == [0] * 16 + [1] * 16 + [2] * 16
    ln = x0 - tok.position_code - tok.label_embedding[labels]
    np.testing.assert_allclose(ln.mean(axis=2), 0.0, atol=1e-12)
    np.testing.assert_allclose(ln.var(axis=2), 1.0, atol=1e-3)  # var/(var + 1e-5) for these patches
    np.testing.assert_allclose(np.sqrt(np.mean(tok.position_code**2, axis=1)), 1.0)
    assert len({tuple(np.round(r, 12)) for r in tok.position_code}) == 48  # distinct positions
    # label part: same for all tokens of an image, different between labels 0/1/2
    lab = x0 - tok.position_code - ln
    for k in range(3):
        np.testing.assert_allclose(lab[:, 16 * k:16 * (k + 1)], np.broadcast_to(lab[0, 16 * k], (4, 16, 192)),
                                   atol=1e-12)
    e = tok.label_embedding
    assert not np.allclose(e[0], e[1]) and not np.allclose(e[0], e[2]) and not np.allclose(e[1], e[2])
    assert 0.5 < e.std() < 0.9
    # a blank patch has a zero LayerNorm part
    blank = Tokenizer()(np.zeros((1, 3, 32, 32)))
    np.testing.assert_allclose(blank - Tokenizer().position_code - Tokenizer().label_embedding[labels], 0.0, atol=1e-12)


def test_tokenizer_on_episodes(toy):
    ep = make_episodes(toy, 6, seed=0)
    tok = Tokenizer(size=16, patch=4)
    np.testing.assert_array_equal(tok(ep), tok(ep.images))
    assert tok(ep).shape == (6, 48, 16)


# ----- digits -----------------------------------------------------------------
def test_digits():
    d = read_digits(size=32)
    assert len(d) == 1797 and d.n_classes == 10 and d.images.shape == (1797, 32, 32)
    assert d.group_names == ("digits",) and d.class_names[3] == "digit3"
    assert 0.0 <= d.images.min() and d.images.max() <= 1.0 and d.images.mean() < 0.5
    ep = make_episodes(d, 10, seed=0)
    assert ep.images.shape == (10, 3, 32, 32)


def test_an_undecodable_image_is_named_with_its_zip(fake_omniglot):
    """A member that is not an image names the member and the zip, not ``<_io.BytesIO object at 0x…>``."""
    write_zip(fake_omniglot / "broken.zip", "broken",
              {f"AlphaC/character01/0400_0{d}.png": b"not a png" for d in (1, 2)})
    with pytest.raises(ValueError, match=r"0400_01\.png.*broken\.zip") as err:
        read_omniglot(fake_omniglot, files=("broken.zip",))
    assert "BytesIO" not in str(err.value) and " at 0x" not in str(err.value), err.value


@pytest.mark.parametrize("compression", ["deflated", "stored"])
def test_damaged_zip_member_is_named(tmp_path, compression):
    rng = np.random.default_rng(0)
    members = {}
    for c in (1, 2):
        for d in (1, 2):
            buf = io.BytesIO()
            Image.fromarray((rng.random((40, 40)) < 0.5).astype(np.uint8) * 255).save(buf, format="PNG")
            members[f"top/Alpha/character0{c}/01{c}_0{d}.png"] = buf.getvalue()
    path = tmp_path / "one.zip"
    mode = zipfile.ZIP_DEFLATED if compression == "deflated" else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=mode) as z:
        for name, data in members.items():
            z.writestr(name, data)
    victim = "top/Alpha/character02/012_01.png"
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(victim)
    raw = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    for i in range(start + 20, start + 60):  # inside the member's (compressed) bytes
        raw[i] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=rf"{victim}' in 'one.zip' cannot be read .*damaged"):
        read_omniglot(tmp_path, files=("one.zip",), size=20)
