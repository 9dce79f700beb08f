"""GPU prices (GCP host + GPU sums, name mapping, user rows) and egress tiers (band by band, GiB -> GB)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from scenario_support import SMALL

from fleetplan.cli.main import main
from fleetplan.costmodels.prices import (
    GIB_PER_GB,
    EgressTier,
    GpuPrice,
    egress_cost_usd,
    egress_rate_usd_per_gb,
    select_egress_table,
)
from fleetplan.datasets.catalog.egress import load_egress
from fleetplan.datasets.catalog.prices import find_price, load_gpu_prices, skipped_price_rows
from fleetplan.errors import InputError, UnknownNameError

PRICE_HEADER = "provider,instance,region,zone,gpu,gpu_count,usd_per_hour,pricing_model,source"


# ---- egress tiers --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def aws_internet():
    return select_egress_table("aws", "internet", load_egress())


def test_aws_internet_is_us_east_1_not_the_historical_table(aws_internet):
    assert aws_internet.scope.startswith("us-east-1")
    assert [(t.from_gb, t.to_gb, t.usd_per_gb) for t in aws_internet.tiers] == [
        (0, 100, 0), (100, 10240, 0.09), (10240, 51200, 0.085), (51200, 153600, 0.07), (153600, None, 0.05)]


# Hand arithmetic, band by band:
#   100 GB:     first 100 GB free                                         = 0
#   10,240 GB:  (10,240 - 100) x 0.09 = 10,140 x 0.09                     = 912.60
#   51,200 GB:  912.60 + (51,200 - 10,240) x 0.085 = 912.60 + 3,481.60     = 4,394.20
#   153,600 GB: 4,394.20 + (153,600 - 51,200) x 0.07 = 4,394.20 + 7,168    = 11,562.20
#   200,000 GB: 11,562.20 + (200,000 - 153,600) x 0.05 = 11,562.20 + 2,320 = 13,882.20
@pytest.mark.parametrize("volume_gb,usd", [
    (0, 0.0), (50, 0.0), (100, 0.0), (101, 0.09), (10_240, 912.6), (51_200, 4394.2), (153_600, 11_562.2),
    (200_000, 13_882.2)])
def test_aws_internet_tier_boundaries(aws_internet, volume_gb, usd):
    assert egress_cost_usd(volume_gb, aws_internet) == pytest.approx(usd, abs=1e-6)


@pytest.mark.parametrize("boundary,below_rate,above_rate", [
    (100, 0.0, 0.09), (10_240, 0.09, 0.085), (51_200, 0.085, 0.07), (153_600, 0.07, 0.05)])
def test_aws_internet_marginal_rate_each_side_of_boundary(aws_internet, boundary, below_rate, above_rate):
    # One GB below a boundary costs the lower band's rate, one GB above it the upper band's rate: continuous.
    c = egress_cost_usd(boundary, aws_internet)
    assert c - egress_cost_usd(boundary - 1, aws_internet) == pytest.approx(below_rate)
    assert egress_cost_usd(boundary + 1, aws_internet) - c == pytest.approx(above_rate)


def test_cost_never_falls_as_volume_grows():
    for table in load_egress():
        top = min(table.covered_gb, 400_000)
        vols = [top * k / 400 for k in range(401)]
        costs = [egress_cost_usd(v, table) for v in vols]
        assert all(b >= a - 1e-9 for a, b in zip(costs, costs[1:], strict=False)), table.scope


def test_gib_quoted_prices_converted_to_gb():
    # GCP cross-zone 0.01 USD/GiB = 0.01 / 1.073741824 USD/GB.
    assert egress_rate_usd_per_gb("gcp", "cross_zone", load_egress()) == pytest.approx(0.01 / 1.073741824)
    t = select_egress_table("gcp", "internet", load_egress())
    # 'to North America': first GiB free, then 0.12 USD/GiB to 1,024 GiB; bounds in GB = GiB x 1.073741824.
    assert t.tiers[1].from_gb == pytest.approx(1.073741824)
    assert t.tiers[1].to_gb == pytest.approx(1024 * 1.073741824)  # 1,099.511627776 GB
    # Cost at 1,024 GiB = 1,023 GiB x 0.12 = 122.76 USD, whatever the unit.
    assert egress_cost_usd(1024 * GIB_PER_GB, t) == pytest.approx(122.76)
    # Next band (quoted per GB, range 0.065..0.085 -> high 0.085) starts where the GiB band ends.
    assert t.tiers[2].from_gb == pytest.approx(1099.511627776) and t.tiers[2].usd_per_gb == 0.085


def test_ranges_use_high_by_default_low_on_request():
    assert egress_rate_usd_per_gb("gcp", "inter_region", load_egress()) == 0.02  # same continent 0.01..0.02
    assert egress_rate_usd_per_gb("gcp", "inter_region", load_egress(bound="low")) == 0.01
    assert egress_rate_usd_per_gb("gcp", "inter_region", load_egress(), scope="between continents") == 0.08


def test_aws_cross_zone_charged_both_sides():
    assert egress_rate_usd_per_gb("aws", "cross_zone", load_egress()) == 0.02  # 0.01 each direction x 2 per GB moved
    assert egress_rate_usd_per_gb("aws", "cross_zone", load_egress(), per_direction=True) == 0.01
    assert egress_rate_usd_per_gb("aws", "same_zone", load_egress()) == 0.0
    assert egress_rate_usd_per_gb("azure", "cross_zone", load_egress()) == 0.0


def test_azure_internet_pieces_are_chained():
    t = select_egress_table("azure", "internet", load_egress())
    # 0..100 GB free, then the 0.05..0.181 range (high end): 1,100 GB -> 1,000 x 0.181 = 181 USD.
    assert egress_cost_usd(1100, t) == pytest.approx(181.0)


def test_tier_errors(aws_internet):
    with pytest.raises(InputError, match="has monthly volume tiers"):
        egress_rate_usd_per_gb("aws", "internet", load_egress())
    with pytest.raises(InputError, match=">= 0"):
        egress_cost_usd(-1, aws_internet)
    with pytest.raises(InputError, match="finite"):
        egress_cost_usd(float("nan"), aws_internet)
    with pytest.raises(InputError, match="contiguous"):
        egress_cost_usd(10, [EgressTier(0, 5, 0.1), EgressTier(6, None, 0.05)])
    with pytest.raises(InputError, match="not 0"):
        egress_cost_usd(10, [EgressTier(1, None, 0.1)])
    with pytest.raises(InputError, match="last band with a price"):
        egress_cost_usd(20, [EgressTier(0, 10, 0.1)])
    with pytest.raises(UnknownNameError, match="did you mean"):
        egress_rate_usd_per_gb("aws", "cross_zones", load_egress())
    with pytest.raises(InputError, match="absurd"):
        EgressTier(0, None, 90.0)


def test_user_egress_rows_become_default(tmp_path):
    f = tmp_path / "eg.csv"
    f.write_text("provider,category,scope,tier_from_gb,tier_to_gb,usd_per_unit_low,usd_per_unit_high,unit\n"
                 "AWS,internet_egress,negotiated,0,,0.03,0.03,USD/GB\n")
    t = select_egress_table("aws", "internet", load_egress(f))
    assert t.scope == "negotiated" and egress_cost_usd(1000, t) == pytest.approx(30.0)
    f.write_text("provider,category,scope,tier_from_gb,tier_to_gb,usd_per_unit_low,usd_per_unit_high,unit\n"
                 "AWS,internet_egress,x,0,,-0.03,,USD/GB\n")
    with pytest.raises(InputError, match="below the minimum") as exc:
        load_egress(f)
    assert exc.value.row == 1 and exc.value.field == "usd_per_unit_low"


# ---- GPU prices ----------------------------------------------------------------------------------------------

def _one(prices, **kw):
    rows = [p for p in prices if all(getattr(p, k) == v for k, v in kw.items())]
    assert len(rows) == 1, rows
    return rows[0]


def test_gcp_node_price_is_host_plus_gpus():
    prices = load_gpu_prices()
    # a2-ultragpu-1g us-central1-a: host row 1.09962 + A100-80GB x1 GPU row 1.84620 = 2.94582 USD/h;
    # spot 0.43983 + 1.5712 = 2.01103.
    p = _one(prices, instance="a2-ultragpu-1g", zone="us-central1-a", pricing_model="on-demand")
    assert p.gpu == "A100-SXM4-80GB" and p.gpus_per_node == 1
    assert p.node_usd_per_hour == pytest.approx(2.94582)
    s = _one(prices, instance="a2-ultragpu-1g", zone="us-central1-a", pricing_model="spot")
    assert s.node_usd_per_hour == pytest.approx(2.01103)
    # a3-highgpu-2g us-central1-b: 2.36502 + H100 x2 8.40152 = 10.76654; per GPU 5.38327.
    p = _one(prices, instance="a3-highgpu-2g", zone="us-central1-b", pricing_model="on-demand")
    assert p.gpu == "H100-SXM-80GB" and p.usd_per_gpu_hour == pytest.approx(5.38327)


def test_gcp_sum_agrees_with_independent_billing_api_figure():
    # a2-highgpu-8g us-central1-a: host 5.91582 + A100 x8 23.47126 = 29.38708 USD/h = 3.673385 per GPU, the same
    # as the per-GPU a2-highgpu-1g price in gpu_prices.csv (Cyclenerd pricing.yml, Google Billing Catalog API).
    prices = load_gpu_prices()
    p = _one(prices, instance="a2-highgpu-8g", zone="us-central1-a", pricing_model="on-demand")
    assert p.gpu == "A100-SXM4-40GB"
    assert p.node_usd_per_hour == pytest.approx(29.38708)
    q = _one(prices, cloud="gcp", instance="a2-highgpu-1g", zone="", pricing_model="on-demand")
    assert p.usd_per_gpu_hour == pytest.approx(q.usd_per_gpu_hour, rel=1e-5)


def test_aws_and_azure_skypilot_rows():
    prices = load_gpu_prices()
    p = _one(prices, cloud="aws", zone="use1-az3", instance="p5.48xlarge", pricing_model="spot")
    assert p.node_usd_per_hour == 20.9934 and p.usd_per_gpu_hour == pytest.approx(20.9934 / 8)
    od = _one(prices, cloud="aws", zone="use1-az3", instance="p5.48xlarge", pricing_model="on-demand")
    assert od.usd_per_gpu_hour == pytest.approx(98.32 / 8)  # 12.29
    # p5e has a blank on-demand Price: spot only.
    assert not [q for q in prices if q.instance == "p5e.48xlarge" and q.pricing_model == "on-demand"]
    nc = [q for q in prices if q.cloud == "azure" and q.instance == "Standard_NC24ads_A100_v4"]
    assert nc and {q.gpu for q in nc} == {"A100-PCIe-80GB"} and {q.zone for q in nc} == {""}


def test_price_file_gpu_names_mapped():
    prices = load_gpu_prices()
    assert _one(prices, instance="p4d.24xlarge", pricing_model="on-demand").gpu == "A100-SXM4-40GB"  # 40 GB
    assert _one(prices, instance="p4de.24xlarge", pricing_model="on-demand").gpu == "A100-SXM4-80GB"  # 80 GB
    assert _one(prices, instance="g5.xlarge").gpu == "A10G"
    blocks = [q for q in prices if q.instance == "p5.48xlarge" and q.pricing_model == "capacity-block"]
    assert sorted(q.region for q in blocks) == ["us-east-1", "us-east-2"]  # 'us-east-1 / us-east-2'
    skipped = {(s.instance, s.price_gpu) for s in skipped_price_rows()}
    assert ("Standard_NC40ads_H100_v5", "H100 NVL") in skipped
    assert ("Standard_ND96isr_H100_v5", "H100") in skipped  # the SkyPilot row with 12 GPUs
    assert all(q.gpu != "H100 NVL" for q in prices)


def test_find_price():
    # us-east-1 on-demand H100: 55.04/8 = 6.88 (gpu_prices.csv, after the 2025 cut) beats SkyPilot's 98.32/8.
    assert find_price("H100", "aws", "us-east-1").usd_per_gpu_hour == pytest.approx(6.88)
    assert find_price("H100", "AWS", "us-east-1", "spot").zone == "use1-az3"  # 20.9934, cheapest AZ
    assert find_price("A100-80GB", "gcp", "us-central1").usd_per_gpu_hour == pytest.approx(2.94582)
    with pytest.raises(InputError, match="available: .*us-east-1") as exc:
        find_price("H100", "aws", "mars-1")
    assert not isinstance(exc.value, UnknownNameError)
    with pytest.raises(UnknownNameError, match="did you mean"):
        find_price("H100", "awz", "us-east-1")
    with pytest.raises(UnknownNameError):
        find_price("H1000", "aws", "us-east-1")


def test_user_price_rows(tmp_path):
    f = tmp_path / "p.csv"
    f.write_text(PRICE_HEADER + "\naws,p5.48xlarge,us-east-1,,H100,8,40.0,negotiated,our contract\n"
                 "AWS,p5.48xlarge,us-east-1,,H100,8,44.0,on-demand,quote\n")
    prices = load_gpu_prices(f)
    p = find_price("H100", "aws", "us-east-1", "negotiated", prices)
    assert p.usd_per_gpu_hour == 5.0  # 40 / 8
    # The user on-demand row replaced the shipped one with the same cloud/region/zone/instance/model (55.04).
    assert find_price("H100", "aws", "us-east-1", prices=prices).node_usd_per_hour == 44.0
    y = tmp_path / "p.yaml"
    y.write_text("- {provider: gcp, instance: my-l4, region: us-central1, gpu: l4, gpu_count: 2, "
                 "usd_per_hour: 1.0, pricing_model: spot}\n")
    assert find_price("L4", "gcp", "us-central1", "spot", load_gpu_prices(y)).usd_per_gpu_hour == 0.5


@pytest.mark.parametrize("cells,match", [
    ("aws,x,us-east-1,,H100,8,-1,on-demand,s", "below the minimum"),
    ("aws,x,us-east-1,,H100,8,5000,on-demand,s", "above the maximum"),
    ("aws,x,us-east-1,,H100,0,10,on-demand,s", "below the minimum"),
    ("aws,x,us-east-1,,H100,8,nan,on-demand,s", "not a finite number"),
    ("aws,x,us-east-1,,H100,8,10,monthly,s", "pricing model"),
    ("aws,x,us-east-1,,H1000,8,10,on-demand,s", "did you mean"),
])
def test_bad_price_rows(tmp_path, cells, match):
    f = tmp_path / "bad.csv"
    f.write_text(PRICE_HEADER + "\n" + cells + "\n")
    with pytest.raises(InputError, match=match):
        load_gpu_prices(f)


def test_gpu_price_record_checks():
    p = GpuPrice("aws", "us-east-1", "", "H100-SXM-80GB", "p5.48xlarge", 8, 98.32)
    assert p.usd_per_gpu_hour == pytest.approx(12.29)
    with pytest.raises(InputError, match="differs"):
        GpuPrice("aws", "us-east-1", "", "H100-SXM-80GB", "p5.48xlarge", 8, 98.32, usd_per_gpu_hour=98.32)
    with pytest.raises(InputError, match="gpus_per_node"):
        GpuPrice("aws", "us-east-1", "", "H100-SXM-80GB", "p5.48xlarge", 0, 98.32)


@pytest.mark.parametrize("price, warned", [(700.0, True), (0.5, True), (68.0, False), (0.7, False), (5.0, False)])
def test_a_price_far_from_the_catalogs_is_planned_with_a_warning(tmp_path, price, warned):
    # issue 28: `usd_per_gpu_hour: 700` on an aws:us-east-1 H100 row (catalog: 6.88 USD/GPU-h, p5.48xlarge) planned
    # without a word. 700 / 6.88 = 101.7 (> 10), 0.5 / 6.88 = 0.0727 (< 1/10): warned on stderr and recorded in the
    # plan's pool; 68 / 6.88 = 9.88 and 0.7 / 6.88 = 0.102 lie within 10 × either way and pass, as does 5.0.
    sc = tmp_path / "s.yaml"
    sc.write_text(SMALL.replace("gpus_per_node: 8}", f"gpus_per_node: 8, usd_per_gpu_hour: {price}}}"))
    res = CliRunner().invoke(main, ["plan", str(sc), "--no-baselines", "-o", "json"])
    assert res.exit_code == 0, res.output
    pool = json.loads(res.stdout)["pools"][0]
    assert pool["usd_per_gpu_hour"] == price  # used as given
    if warned:
        ratio = f"{price / 6.88:.3g}"
        assert f"is {ratio} × the 6.88 of the catalog (aws p5.48xlarge us-east-1 on-demand" in pool["price_warning"]
        assert f"warning: price of aws:us-east-1/H100-SXM-80GB: {price:g} USD/GPU-h is {ratio} ×" in res.stderr
    else:
        assert "price_warning" not in pool and "warning: price" not in res.stderr
