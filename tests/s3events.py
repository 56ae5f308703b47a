"""S3's event notifications as S3 sends them to Lambda, for calling the deploy Lambda's handler directly."""

from __future__ import annotations

import urllib.parse

BUCKET = "team-a-manifests"  # the bucket an event is about, unless told


def s3_event(
    key: str, version_id: str | None, *, created: bool = True, bucket: str = BUCKET, name: str | None = None
) -> dict:
    """One record as S3 sends it to Lambda (keys URL-encoded, spaces as '+')."""
    obj = {
        "key": urllib.parse.quote_plus(key, safe="/"),
        "size": 120,
        "eTag": "0123456789abcdef",
        "sequencer": "0065A1B2C3D4E5F601",
    }
    if version_id:
        obj["versionId"] = version_id
    return {
        "Records": [
            {
                "eventVersion": "2.1",
                "eventSource": "aws:s3",
                "awsRegion": "eu-west-1",
                "eventTime": "2026-11-21T07:00:00.000Z",
                "eventName": name or ("ObjectCreated:Put" if created else "ObjectRemoved:DeleteMarkerCreated"),
                "userIdentity": {"principalId": "AWS:AIDAEXAMPLE"},
                "requestParameters": {"sourceIPAddress": "10.0.0.1"},
                "responseElements": {
                    "x-amz-request-id": "C3D13FE58DE4C810",
                    "x-amz-id-2": "FMyUVURIY8/IgAtTv8xRjskZQpcIZ9",
                },
                "s3": {
                    "s3SchemaVersion": "1.0",
                    "configurationId": "deploy-on-manifest",
                    "bucket": {
                        "name": bucket,
                        "ownerIdentity": {"principalId": "A3NL1KOZZKExample"},
                        "arn": f"arn:aws:s3:::{bucket}",
                    },
                    "object": obj,
                },
            }
        ]
    }
