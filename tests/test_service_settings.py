"""The service's one configuration record: built from flags, then FLEETPLAN_* environment variables, then a config
file, then defaults (main's `serve` took 36 parameters and built its settings by hand)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from fleetplan.cli.main import main
from fleetplan.errors import InputError
from fleetplan.service.settings import ServiceSettings, load_settings
from fleetplan.solvers.online.config import OnlineConfig

TOKEN = "settings-token-1"


def test_flags_beat_the_environment_which_beats_the_file(tmp_path):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("interval_s: 120\nresolve_every_s: 0\nmax_plans: 100\nonline:\n  cooldown_s: 600\n"
                   "  migration_budget: 4\ntoken_file: token.txt\n")
    (tmp_path / "token.txt").write_text(TOKEN + "\n")
    env = {"FLEETPLAN_INTERVAL_S": "60", "FLEETPLAN_ONLINE__COOLDOWN_S": "900"}
    s = load_settings({"interval_s": 30.0}, config_file=str(cfg), environ=env)
    assert s.interval_s == 30.0  # flag
    assert s.online.cooldown_s == 900  # environment over file
    assert s.online.migration_budget == 4 and s.max_plans == 100 and s.resolve_every_s == 0  # file
    assert s.online.ewma_alpha == OnlineConfig().ewma_alpha  # default
    assert s.secret("token") == TOKEN and TOKEN not in repr(s)  # read from token_file; never shown
    # the config file may come from FLEETPLAN_CONFIG too
    assert load_settings({}, environ={"FLEETPLAN_CONFIG": str(cfg)}).max_plans == 100


def test_a_misspelled_environment_variable_is_refused_not_ignored():
    # FLEETPLAN_INTERVL_S (found by a fresh user) started the service with the default interval, without a word.
    with pytest.raises(InputError, match="FLEETPLAN_INTERVL_S.*did you mean FLEETPLAN_INTERVAL_S"):
        load_settings({}, environ={"FLEETPLAN_INTERVL_S": "5"})
    with pytest.raises(InputError, match="FLEETPLAN_CACHE_DIRR.*did you mean FLEETPLAN_CACHE_DIR"):
        load_settings({}, environ={"FLEETPLAN_CACHE_DIRR": "/tmp/c"})  # every command's variable, misspelled
    with pytest.raises(InputError, match="did you mean FLEETPLAN_ONLINE__COOLDOWN_S"):
        load_settings({}, environ={"FLEETPLAN_ONLINE__COOLDWN_S": "600"})
    # a variable far from every setting may belong to something else: not the service's to refuse
    # and the project's own test switches are not settings (FLEETPLAN_TEST_PROMETHEUS_URL is close to
    # FLEETPLAN_PROMETHEUS_URL, but CI sets it for the tests), nor is every command's FLEETPLAN_CACHE_DIR
    assert load_settings({}, environ={"FLEETPLAN_TEST_PROMETHEUS_URL": "http://x", "FLEETPLAN_PACKAGING_TEST": "1",
                                      "FLEETPLAN_SOMETHING_ELSE_ENTIRELY": "1", "FLEETPLAN_INSECURE_NO_AUTH": "true",
                                      "FLEETPLAN_CACHE_DIR": "/tmp/c"})


def test_mistakes_name_the_key_and_where_it_came_from(tmp_path):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("insecure_no_auth: true\nintervall_s: 5\n")
    with pytest.raises(InputError, match="unknown key 'intervall_s'.*did you mean 'interval_s'"):
        load_settings({}, config_file=str(cfg), environ={})
    cfg.write_text("insecure_no_auth: true\nonline: {cooldwn_s: 5}\n")
    with pytest.raises(InputError, match="online.cooldwn_s.*did you mean 'online.cooldown_s'"):
        load_settings({}, config_file=str(cfg), environ={})
    cfg.write_text("insecure_no_auth: true\ninterval_s: 5\ninterval_s: 6\n")
    with pytest.raises(InputError, match="given twice"):
        load_settings({}, config_file=str(cfg), environ={})
    with pytest.raises(InputError, match="FLEETPLAN_MAX_PLANS") as err:
        load_settings({}, environ={"FLEETPLAN_INSECURE_NO_AUTH": "true", "FLEETPLAN_MAX_PLANS": "many"})
    assert err.value.field == "max_plans"
    with pytest.raises(InputError, match="at least 8 characters"):
        ServiceSettings(token="short")
    with pytest.raises(InputError, match="insecure-no-auth"):
        ServiceSettings(token=None)
    r = CliRunner().invoke(main, ["serve", "--insecure-no-auth", "--interval", "-5"])
    assert r.exit_code == 2 and "field '--interval'" in r.output and "below the minimum 0" in r.output, r.output
    # A sub-second period: a fresh user's --interval 0.001 stored 319 MB of plans in 15 s. 0 (rounds on request
    # only) and 1 s stay allowed.
    r = CliRunner().invoke(main, ["serve", "--insecure-no-auth", "--interval", "0.5"])
    assert r.exit_code == 2 and "field '--interval'" in r.output and "0.5 s is below 1 s" in r.output, r.output
    assert ServiceSettings(insecure_no_auth=True, interval_s=0).interval_s == 0
    assert ServiceSettings(insecure_no_auth=True, interval_s=1).interval_s == 1
    # A re-solve limit below the solvers' 0.5 s started the service, then failed every re-solve.
    r = CliRunner().invoke(main, ["serve", "--insecure-no-auth", "--resolve-time-limit", "0.01"])
    assert r.exit_code == 2 and "field '--resolve-time-limit'" in r.output and "0.5" in r.output, r.output
    r = CliRunner().invoke(main, ["serve", "--insecure-no-auth", "--cooldown", "-1"])
    assert r.exit_code == 2 and "field '--cooldown'" in r.output, r.output


def test_every_flag_names_its_environment_variable_and_config_key():
    r = CliRunner().invoke(main, ["serve", "--help"])
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    for key in ("interval_s", "lease_ttl_s", "max_pending_writes", "observation_retention_s", "online.cooldown_s"):
        assert f"config key {key}" in text, key
    assert "env FLEETPLAN_LEASE_TTL_S" in text and "env FLEETPLAN_ONLINE__COOLDOWN_S" in text
