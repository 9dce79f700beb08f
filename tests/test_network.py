"""Sites, route classes, links and transfer times (hand arithmetic), plus the energy estimate."""

from __future__ import annotations

import pytest

from fleetplan.costmodels.energy import energy_kwh, power_w
from fleetplan.costmodels.network import Link, Site, route_class, transfer_time_s
from fleetplan.datasets.network import inter_node_link, load_network_graph
from fleetplan.errors import InputError


def test_site_parse_and_format():
    s = Site.parse("aws:us-east-1:use1-az1")
    assert (s.cloud, s.region, s.zone) == ("aws", "us-east-1", "use1-az1")
    assert str(s) == "aws:us-east-1:use1-az1" and Site.parse("AWS:us-east-1").name == "aws:us-east-1"
    for bad in ("aws", "aws::x", "aws:us east", ":us-east-1"):
        with pytest.raises(InputError):
            Site.parse(bad)


def test_route_classes():
    assert route_class("aws:us-east-1:use1-az1", "aws:us-east-1:use1-az1") == "same_zone"
    assert route_class("aws:us-east-1", "aws:us-east-1") == "same_zone"
    assert route_class("aws:us-east-1:use1-az1", "aws:us-east-1:use1-az2") == "cross_zone"
    assert route_class("aws:us-east-1:use1-az1", "aws:us-east-1") == "cross_zone"
    assert route_class("aws:us-east-1", "aws:eu-west-1") == "inter_region"
    assert route_class("aws:us-east-1", "gcp:us-east1") == "internet"


def test_transfer_time_known_pair_by_hand():
    # us-east-1 -> eu-west-1: 5 Gbit/s = 6.25e8 B/s, RTT 70 ms: 1e9 B / 6.25e8 + 0.070/2 = 1.6 + 0.035 = 1.635 s.
    g = load_network_graph()
    assert transfer_time_s(1e9, "aws:us-east-1", "aws:eu-west-1", g) == pytest.approx(1.635)
    # Symmetric, and zones of a known region pair use the region row.
    assert transfer_time_s(1e9, "aws:eu-west-1:euw1-az1", "aws:us-east-1", g) == pytest.approx(1.635)


def test_unknown_pairs_use_class_defaults():
    g = load_network_graph()
    # Unknown region pair: default inter-region row, RTT 100 ms; 0 bytes cost one-way latency 0.05 s.
    assert g.transfer_time_s(0, "aws:us-east-1", "aws:sa-east-1") == pytest.approx(0.05)
    # Cross-zone default: 5 Gbit/s, 1 ms: 1.25e8 B -> 0.2 s + 0.0005 s.
    assert g.transfer_time_s(1.25e8, "aws:us-east-1:a1", "aws:us-east-1:a2") == pytest.approx(0.2005)
    assert g.link("aws:us-east-1", "gcp:us-east1").link_class == "internet"


def test_inter_node_links_per_gpu():
    # InfiniBand NDR 400 Gbit/s per GPU = 5e10 B/s; p5 3,200 Gbit/s shared by 8 GPUs = 400 Gbit/s = 5e10 B/s;
    # p4d 400 Gbit/s shared by 8 = 50 Gbit/s = 6.25e9 B/s.
    assert inter_node_link().bandwidth_bytes_per_s == pytest.approx(5e10)
    g = load_network_graph()
    assert g.inter_node_link("aws-p5-efa").bandwidth_bytes_per_s == pytest.approx(5e10)
    assert g.inter_node_link("aws-p4d-efa").bandwidth_bytes_per_s == pytest.approx(6.25e9)
    with pytest.raises(InputError, match="did you mean"):
        g.inter_node_link("aws-p5-ef")


def test_link_rejects_milliseconds_and_bad_bytes():
    with pytest.raises(InputError, match="seconds"):
        Link(1e9, 70)
    with pytest.raises(InputError):
        Link(1e9, 0.07).transfer_time_s(-5)


def test_lowest_rtt_path_uses_networkx():
    g = load_network_graph()
    path, rtt = g.lowest_rtt_path("aws:us-west-2", "aws:eu-central-1")
    # Direct us-west-2 -> eu-west-1 (125 ms) -> eu-central-1 (25 ms) = 150 ms beats via us-east-1 (65+70+25 = 160).
    assert path == ["aws:us-west-2", "aws:eu-west-1", "aws:eu-central-1"]
    assert rtt == pytest.approx(0.150)


def test_links_file_missing_default_row(tmp_path):
    p = tmp_path / "links.csv"
    p.write_text("link_class,name,src,dst,bandwidth_gbps,gpus_sharing,rtt_ms,is_default,estimate,source\n"
                 "same_zone,default,,,5,1,0.1,1,yes,x\n")
    with pytest.raises(InputError, match="default row"):
        load_network_graph(p)


def test_energy_estimate_by_hand():
    # 700 W TDP, idle 15% = 105 W; at 50% utilization 105 + 595 × 0.5 = 402.5 W; 10 h -> 4.025 kWh.
    assert power_w(700, 0.5, 0.15) == pytest.approx(402.5)
    assert energy_kwh(700, 0.5, 10, idle_fraction=0.15) == pytest.approx(4.025)
    # Idle all day: 105 W × 24 h = 2.52 kWh.
    assert energy_kwh(700, 0.0, 24, idle_fraction=0.15) == pytest.approx(2.52)
    with pytest.raises(InputError):
        energy_kwh(700, 60, 1, idle_fraction=0.15)
    with pytest.raises(InputError):
        energy_kwh(700, 0.5, -1, idle_fraction=0.15)
