"""On-Demand prices per instance-hour: the AWS Price List API when credentials reach it, else the
table shipped in gpuforge/data/prices.yaml (each row with its date and public source).

The Price List API (`pricing` client, served from us-east-1) answers GetProducts with PriceList
entries, each a JSON document of one product (`product.attributes`) and its terms
(`terms.OnDemand.<offer>.priceDimensions.<rate>.pricePerUnit.USD`, `unit` "Hrs").
The filters are the ones that leave exactly the Linux, shared-tenancy, On-Demand instance-hour of a
type in a region: without `marketoption=OnDemand` a Capacity Block row of the same type (priced 0)
can match, and without `capacitystatus=Used` the unused-reservation rows do.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any

from gpuforge.display import cut
from gpuforge.loading import parse_yaml

TABLE_FILE = "data/prices.yaml"
PRICING_REGION = "us-east-1"  # the Price List API's endpoint (https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/using-price-list-query-api.html)
FILTERS = {
    "operatingSystem": "Linux",
    "tenancy": "Shared",
    "preInstalledSw": "NA",
    "licenseModel": "No License required",
    "capacitystatus": "Used",
    "marketoption": "OnDemand",
}


@dataclass(frozen=True)
class Price:
    instance_type: str
    region: str
    usd_per_hour: float
    source: str  # what a reader needs to check the figure: the API and SKU, or the table row's date and URL

    def to_json(self) -> dict[str, Any]:
        return {
            "instance_type": self.instance_type,
            "region": self.region,
            "usd_per_instance_hour": self.usd_per_hour,
            "source": self.source,
        }


def _table() -> list[dict[str, Any]]:
    text = resources.files("gpuforge").joinpath(TABLE_FILE).read_text(encoding="utf-8")
    data = parse_yaml(
        text, source=f"gpuforge/{TABLE_FILE}", fix="restore the shipped file", timestamps_as_text=True
    )
    rows: list[dict[str, Any]] = data["prices"]
    return rows


def table_price(instance_type: str, region: str) -> Price | None:
    """The shipped table's row for the type in the region; None where the table has none ("no price")."""
    for row in _table():
        if row["instanceType"] == instance_type and row["region"] == region:
            return Price(
                instance_type,
                region,
                float(row["usdPerHour"]),
                f"gpuforge/{TABLE_FILE}, price list of {row['date']} ({row['source']})",
            )
    return None


def _on_demand_usd(entry: dict[str, Any], where: str) -> set[float]:
    prices: set[float] = set()
    for offer in entry.get("terms", {}).get("OnDemand", {}).values():
        for dimension in offer.get("priceDimensions", {}).values():
            if dimension.get("unit") != "Hrs":
                continue
            usd = dimension.get("pricePerUnit", {}).get("USD")
            try:
                amount = float(usd)
            except (TypeError, ValueError):
                raise ValueError(f"{where}: pricePerUnit.USD = {cut(usd)} is not a number") from None
            if not math.isfinite(amount):
                raise ValueError(f"{where}: pricePerUnit.USD = {cut(usd)} is not a finite number")
            prices.add(amount)
    return prices


def api_price(client: Any, instance_type: str, region: str) -> Price | None:
    """The Price List API's On-Demand price; None when it lists no such product (or no single price)."""
    filters = [{"Type": "TERM_MATCH", "Field": "instanceType", "Value": instance_type}]
    filters.append({"Type": "TERM_MATCH", "Field": "regionCode", "Value": region})
    filters.extend({"Type": "TERM_MATCH", "Field": key, "Value": value} for key, value in FILTERS.items())
    answer = client.get_products(
        ServiceCode="AmazonEC2", Filters=filters, FormatVersion="aws_v1", MaxResults=100
    )
    found: dict[float, str] = {}
    for index, text in enumerate(answer.get("PriceList", [])):
        where = f"Price List GetProducts PriceList[{index}]"
        entry = json.loads(text)
        attributes = entry.get("product", {}).get("attributes", {})
        if attributes.get("instanceType") != instance_type:
            continue  # not the product asked for: never priced as if it were
        for usd in _on_demand_usd(entry, where):
            found[usd] = (
                f"{entry.get('product', {}).get('sku', '?')}, publication {entry.get('publicationDate', '?')}"
            )
    positive = {usd: sku for usd, sku in found.items() if usd > 0}
    if len(positive) != 1:
        return None
    ((usd, sku),) = positive.items()
    return Price(instance_type, region, usd, f"AWS Price List API (GetProducts), SKU {sku}")


def price(instance_type: str, region: str, *, client: Any | None) -> tuple[Price | None, str]:
    """The price and a line saying where it came from: the API with a client, else the table."""
    if client is not None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            found = api_price(client, instance_type, region)
        except (BotoCoreError, ClientError, ValueError) as error:  # ValueError: a PriceList entry not JSON
            table = table_price(instance_type, region)
            return (
                table,
                f"the Price List API failed ({error}); {'no price' if table is None else table.source}",
            )
        if found is not None:
            return found, found.source
        return (
            None,
            f"no price: the Price List API lists no single On-Demand Linux price for {instance_type} in {region}",
        )
    table = table_price(instance_type, region)
    if table is None:
        return (
            None,
            f"no price: no AWS credentials for the Price List API, and gpuforge/{TABLE_FILE} has no row for {instance_type} in {region}",
        )
    return table, table.source


def pricing_client() -> Any | None:
    """A Price List client from the standard credential chain, or None when there are no credentials; an AWS
    configuration botocore cannot use is exit 2 (gpuforge.aws_session), not a silent fall back to the table."""
    from botocore.config import Config

    from gpuforge.aws_session import client, open_session

    command = "gpuforge usage"
    session = open_session(PRICING_REGION, command=command, credentials_required=False)
    if session.get_credentials() is None:
        return None
    # Short timeouts: without an answer the report falls back to the table rather than wait minutes.
    config = Config(connect_timeout=5, read_timeout=15, retries={"mode": "standard", "max_attempts": 3})
    return client(session, "pricing", command=command, region_name=PRICING_REGION, config=config)
