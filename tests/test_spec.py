"""Specs (bayes_attn.spec): type errors name the field."""

import pytest

from bayes_attn.spec import spec_from_dict
from conftest import TINY


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
