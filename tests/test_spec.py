"""Specs (bayes_attn.spec): type errors name the field."""

import pytest
from conftest import TINY

from bayes_attn.spec import load_spec, spec_from_dict


@pytest.mark.parametrize("change, match", [
    ({"network": {"beta": "x"}}, "network.beta must be a number"),
    ({"task": {"p_stay": 0.7}}, "task.p_stay must be a list of 2 numbers"),
    ({"compare": {"widths": 10}}, "compare.widths must be a list of integers"),
    ({"task": {"seed": 1.5}}, "task.seed must be an integer"),
    ({"task": 5}, r"\[task\] must be a table"),
    ({"network": {"random_seed": -5}}, r"\[network\] random_seed must be an integer >= 0"),
    ({"sampler": {"seed": "0"}}, "sampler.seed must be an integer"),
    ({"temperature": "hot"}, "temperature must be a number"),
    ({"name": "../../escape"}, "name must be"),  # 13. names cannot leave the output folder
    ({"name": ".hidden"}, "name must be"),
    ({"compare": {"rtol": 1e9}}, "compare.rtol must be a relative tolerance strictly between 0 and 1, got 1000000000"),
    ({"compare": {"n_sigma": 1e9}}, "compare.n_sigma must be between 1 and 10 Monte-Carlo standard errors"),
])
def test_spec_type_errors_name_the_field(change, match):
    with pytest.raises(ValueError, match=match):
        spec_from_dict(TINY | change)


def test_spec_with_a_byte_order_mark_reads_and_latin1_is_named(tmp_path):
    bom = tmp_path / "bom.toml"
    bom.write_bytes(b"\xef\xbb\xbf" + '# café\nname = "bom"\n'.encode())
    assert load_spec(bom).name == "bom"
    latin = tmp_path / "latin.toml"
    latin.write_bytes('# café\nname = "latin"\n'.encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin.toml' is not UTF-8 text \(byte 5"):
        load_spec(latin)


def test_nested_list_types_read_well():
    with pytest.raises(ValueError, match=r"network.layers must be a list of lists of strings, got 5$"):
        spec_from_dict({"network": {"layers": 5}})
    with pytest.raises(ValueError, match=r"compare.widths must be a list of integers, got 'x'$"):
        spec_from_dict({"compare": {"widths": "x"}})
