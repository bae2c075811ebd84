"""Prices: the AWS Price List API through botocore's Stubber (requests and responses checked against
botocore's model), the shipped table, and the Capacity Block fee's absence from a purchased block.

Response bodies: the GetProducts example of the AWS CLI's documentation
(aws/aws-cli awscli/examples/pricing/get-products.rst, commit 3096efebc92a9c67a6b44c05ac7438df1958c9b3;
also https://docs.aws.amazon.com/code-library/latest/ug/pricing_example_pricing_GetProducts_section.html),
as published (an EBS volume), and the same document with the product and price of the us-east-1
p5.48xlarge Linux On-Demand row of the Price List offer file of 2026-07-28 (SKU 3D4V8UAYEMB38GU2,
usagetype BoxUsage:p5.48xlarge, 55.0400000000 USD per Hrs), as quoted in
cmanaha/tech-deep-dives deep-dives/efa/research/2026-08-refresh/V2-verify-pricing.md
(commit dbfbb43e13c700bc576a95440288fa894754effe), which also names the parallel
MarketOption=CapacityBlock row of the same SKU at 0.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from gpuforge import hardware
from gpuforge.regions import is_region
from gpuforge.usage import prices

DOCUMENTED_ENTRY: dict[str, Any] = json.loads(
    '{"product":{"productFamily":"Storage","attributes":{"storageMedia":"SSD-backed","maxThroughputvolume":"320 MB/sec",'
    '"volumeType":"Provisioned IOPS","maxIopsvolume":"20000","servicecode":"AmazonEC2","usagetype":"APS1-EBS:VolumeUsage.piops",'
    '"locationType":"AWS Region","location":"Asia Pacific (Singapore)","servicename":"Amazon Elastic Compute Cloud",'
    '"maxVolumeSize":"16 TiB","operation":""},"sku":"3MKHN58N7RDDVGKJ"},"serviceCode":"AmazonEC2","terms":{"OnDemand":'
    '{"3MKHN58N7RDDVGKJ.JRTCKXETXF":{"priceDimensions":{"3MKHN58N7RDDVGKJ.JRTCKXETXF.6YS6EN2CT7":{"unit":"GB-Mo",'
    '"endRange":"Inf","description":"$0.138 per GB-month of Provisioned IOPS SSD (io1)  provisioned storage - Asia Pacific '
    '(Singapore)","appliesTo":[],"rateCode":"3MKHN58N7RDDVGKJ.JRTCKXETXF.6YS6EN2CT7","beginRange":"0","pricePerUnit":'
    '{"USD":"0.1380000000"}}},"sku":"3MKHN58N7RDDVGKJ","effectiveDate":"2018-08-01T00:00:00Z","offerTermCode":"JRTCKXETXF",'
    '"termAttributes":{}}}},"version":"20180808005701","publicationDate":"2018-08-08T00:57:01Z"}'
)
NEXT_TOKEN = (
    "WGDY7ko8fQXdlaUZVdasFQ==:RVSagyIFn770XQOzdUIcO9BY6ucBG9itXAZGZF/zioUzOsUKh6PCcPWaOyPZRiMePb986TeoKYB9l55fw/"
    "CyoMq5ymnGmT1Vj39TljbbAlhcqnVfTmPIilx8Uy5bdDaBYy/e/2Ofw9Edzsykbs8LTBuNbiDQ+BBds5yeI9AQkUepruKk3aEahFPxJ55kx/zk"
)


def _p5_entry(market: str, usd: str) -> dict[str, Any]:
    """The documented entry carrying the p5.48xlarge row's product and price."""
    entry = copy.deepcopy(DOCUMENTED_ENTRY)
    entry["product"] = {
        "productFamily": "Compute Instance",
        "attributes": {
            "instanceType": "p5.48xlarge",
            "regionCode": "us-east-1",
            "location": "US East (N. Virginia)",
            "operatingSystem": "Linux",
            "tenancy": "Shared",
            "capacitystatus": "Used",
            "marketoption": market,
            "usagetype": "BoxUsage:p5.48xlarge",
            "servicecode": "AmazonEC2",
        },
        "sku": "3D4V8UAYEMB38GU2",
    }
    entry["publicationDate"] = "2026-07-28T17:52:47Z"
    offer = {
        "priceDimensions": {
            "3D4V8UAYEMB38GU2.JRTCKXETXF.6YS6EN2CT7": {
                "unit": "Hrs",
                "endRange": "Inf",
                "description": f"${usd} per On Demand Linux p5.48xlarge Instance Hour",
                "appliesTo": [],
                "rateCode": "3D4V8UAYEMB38GU2.JRTCKXETXF.6YS6EN2CT7",
                "beginRange": "0",
                "pricePerUnit": {"USD": usd},
            }
        },
        "sku": "3D4V8UAYEMB38GU2",
        "effectiveDate": "2026-07-01T00:00:00Z",
        "offerTermCode": "JRTCKXETXF",
        "termAttributes": {},
    }
    entry["terms"] = {"OnDemand": {"3D4V8UAYEMB38GU2.JRTCKXETXF": offer}}
    return entry


def _expected_request(instance_type: str, region: str) -> dict[str, Any]:
    filters = [
        {"Type": "TERM_MATCH", "Field": "instanceType", "Value": instance_type},
        {"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
        *({"Type": "TERM_MATCH", "Field": key, "Value": value} for key, value in prices.FILTERS.items()),
    ]
    return {"ServiceCode": "AmazonEC2", "Filters": filters, "FormatVersion": "aws_v1", "MaxResults": 100}


def _client() -> Any:
    return boto3.client(
        "pricing", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )


def _answer(*entries: dict[str, Any]) -> dict[str, Any]:
    return {
        "FormatVersion": "aws_v1",
        "NextToken": NEXT_TOKEN,
        "PriceList": [json.dumps(entry) for entry in entries],
    }


def test_the_price_list_api_prices_the_on_demand_instance_hour() -> None:
    client = _client()
    with Stubber(client) as stub:
        stub.add_response(
            "get_products",
            _answer(_p5_entry("CapacityBlock", "0.0000000000"), _p5_entry("OnDemand", "55.0400000000")),
            _expected_request("p5.48xlarge", "us-east-1"),
        )
        found, source = prices.price("p5.48xlarge", "us-east-1", client=client)
        stub.assert_no_pending_responses()
    assert found is not None
    assert found.usd_per_hour == 55.04  # the Capacity Block row at 0 is not taken for the price
    assert (
        source == "AWS Price List API (GetProducts), SKU 3D4V8UAYEMB38GU2, publication 2026-07-28T17:52:47Z"
    )


def test_an_answer_for_another_product_is_no_price() -> None:
    """The documentation's answer is an EBS volume: it is never priced as the instance asked for."""
    client = _client()
    with Stubber(client) as stub:
        stub.add_response(
            "get_products", _answer(DOCUMENTED_ENTRY), _expected_request("p5.48xlarge", "us-east-1")
        )
        found, source = prices.price("p5.48xlarge", "us-east-1", client=client)
    assert found is None
    assert source.startswith(
        "no price: the Price List API lists no single On-Demand Linux price for p5.48xlarge"
    )


def test_a_refused_call_falls_back_to_the_table_and_says_so() -> None:
    client = _client()
    with Stubber(client) as stub:
        stub.add_client_error(
            "get_products",
            "AccessDeniedException",
            "not authorized",
            400,
            expected_params=_expected_request("p5.48xlarge", "us-east-1"),
        )
        found, source = prices.price("p5.48xlarge", "us-east-1", client=client)
    assert found is not None and found.usd_per_hour == 55.04
    assert source.startswith("the Price List API failed (An error occurred (AccessDeniedException)")
    assert "; gpuforge/data/prices.yaml, price list of 2026-07-28 (https://github.com/" in source


@pytest.mark.parametrize("usd", ["NaN", "Infinity", "1e999"])
def test_a_price_that_is_not_finite_falls_back_to_the_table_and_says_so(usd: str) -> None:
    """The documented p5 entry with its USD price replaced: a non-finite price never reaches a cost."""
    client = _client()
    with Stubber(client) as stub:
        stub.add_response(
            "get_products", _answer(_p5_entry("OnDemand", usd)), _expected_request("p5.48xlarge", "us-east-1")
        )
        found, source = prices.price("p5.48xlarge", "us-east-1", client=client)
    assert found is not None and found.usd_per_hour == 55.04
    assert source.startswith(
        f"the Price List API failed (Price List GetProducts PriceList[0]: pricePerUnit.USD = '{usd}'"
    )
    assert "is not a finite number); gpuforge/data/prices.yaml" in source


def test_without_credentials_the_table_is_used_and_named() -> None:
    found, source = prices.price("p5.48xlarge", "us-east-1", client=None)
    assert found is not None and found.usd_per_hour == 55.04
    assert source.startswith("gpuforge/data/prices.yaml, price list of 2026-07-28 (https://github.com/")


def test_a_type_the_table_lacks_is_no_price() -> None:
    found, source = prices.price("p5e.48xlarge", "us-east-1", client=None)
    assert found is None
    assert source.startswith(
        "no price: no AWS credentials for the Price List API, and gpuforge/data/prices.yaml has no row"
    )


def test_every_table_row_is_a_catalog_type_in_a_region_with_date_and_source() -> None:
    rows = prices._table()
    assert rows
    for row in rows:
        assert set(row) == {"instanceType", "region", "usdPerHour", "date", "source"}, row
        assert row["instanceType"] in hardware.catalog()
        assert is_region(row["region"])
        assert row["usdPerHour"] > 0
        assert row["source"].startswith("https://")
    assert len({(row["instanceType"], row["region"]) for row in rows}) == len(rows)


def test_a_purchased_capacity_block_carries_no_fee_in_botocores_model() -> None:
    """Why the fee is a flag: offerings carry UpfrontFee, a purchased block and its reservation do not.
    When AWS adds it, this fails, and the report should read it from AWS instead."""
    model = boto3.client("ec2", region_name="us-east-1").meta.service_model
    assert "UpfrontFee" in model.shape_for("CapacityBlockOffering").members
    assert "UpfrontFee" not in model.shape_for("CapacityBlock").members
    assert "UpfrontFee" not in model.shape_for("CapacityReservation").members


def test_credentials_give_a_price_list_client_in_us_east_1_and_none_without(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    assert prices.pricing_client() is None
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    client = prices.pricing_client()
    assert client is not None
    assert client.meta.service_model.service_name == "pricing"
    assert client.meta.region_name == "us-east-1"
