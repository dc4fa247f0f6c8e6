"""Specs (bayes_attn.spec): type errors name the field; the README's demo numbers are the default spec's."""

from pathlib import Path

import pytest

from bayes_attn.spec import Spec, spec_from_dict
from conftest import TINY

ROOT = Path(__file__).resolve().parents[1]



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
])
def test_spec_type_errors_name_the_field(change, match):
    with pytest.raises(ValueError, match=match):
        spec_from_dict(TINY | change)


def test_readme_demo_numbers_match_the_default_spec():
    readme = " ".join((ROOT / "README.md").read_text().split())
    chains = Spec().sampler.num_chains
    assert f"`{Spec().sampler.name}` sampler with {chains} chains" in readme
