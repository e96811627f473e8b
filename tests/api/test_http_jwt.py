"""Bearer JWTs verified against a JWKS file: real RS256 and EdDSA signatures, against the real stack."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from jwt.algorithms import OKPAlgorithm, RSAAlgorithm

from api.endpoints import Endpoints
from api.http.context import jwt_keys
from api.http.settings import ApiSettings
from events.topics import Topics
from tests.api.test_http import YAML, problem, served
from tests.api.test_http_auth import CLUSTER, bearer, job
from tests.service.helpers import running_projector

ISSUER = "https://idp.example/"
AUDIENCE = "tephra-api"
Signer = rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey


def _jwk(kid: str, key: Signer) -> dict[str, object]:
    """The public half of ``key`` as a JWK, with its kid and algorithm."""
    if isinstance(key, rsa.RSAPrivateKey):
        public: dict[str, object] = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
        return public | {"kid": kid, "alg": "RS256", "use": "sig"}
    public = json.loads(OKPAlgorithm.to_jwk(key.public_key()))
    return public | {"kid": kid, "alg": "EdDSA", "use": "sig"}


def sign(key: Signer, kid: str, **claims: object) -> str:
    """A JWT of ``claims`` over sensible defaults (this issuer and audience, an hour to live)."""
    now = int(time.time())
    body = {"iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 3600} | claims
    algorithm = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "EdDSA"
    return jwt.encode(body, key, algorithm=algorithm, headers={"kid": kid})


@pytest.fixture(scope="module")
def keys() -> tuple[rsa.RSAPrivateKey, ed25519.Ed25519PrivateKey]:
    """An RS256 key and an EdDSA one."""
    return rsa.generate_private_key(
        public_exponent=65537, key_size=2048
    ), ed25519.Ed25519PrivateKey.generate()


def jwks_settings(path: Path, *keys: tuple[str, Signer]) -> ApiSettings:
    path.write_text(json.dumps({"keys": [_jwk(kid, key) for kid, key in keys]}), encoding="utf-8")
    return ApiSettings(
        api_jwks_file=path,
        api_jwt_issuer=ISSUER,
        api_jwt_audience=AUDIENCE,
        api_jwt_leeway=0,
        api_tokens_file=path.parent / "no-tokens.json",
    )


async def test_jwts_signed_by_the_jwks_keys_authenticate_with_their_claimed_role_and_scope(
    kafka_bootstrap: str,
    database_url: str,
    topics: Topics,
    tmp_path: Path,
    keys: tuple[rsa.RSAPrivateKey, ed25519.Ed25519PrivateKey],
) -> None:
    rsa_key, ed_key = keys
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    settings = jwks_settings(tmp_path / "jwks.json", ("rsa-1", rsa_key), ("ed-1", ed_key))
    admin = bearer(sign(rsa_key, "rsa-1", sub="ops", tephra_role="admin"))
    submitter = bearer(
        sign(
            ed_key,
            "ed-1",
            sub="team-a-ci",
            tephra_role="submitter",
            tephra_queues=["research"],
            tephra_namespaces=["team-a"],
        )
    )
    viewer = bearer(sign(ed_key, "ed-1", sub="dash", tephra_role="viewer"))
    async with running_projector(kafka_bootstrap, database_url, topics), served(endpoints, settings) as api:

        async def post(text: str, who: dict[str, str]) -> httpx.Response:
            return await api.post("/v1/manifests?wait=archived", content=text, headers={**YAML, **who})

        # Valid, RS256 and EdDSA: each with the role and scope its claims give.
        assert (await post(CLUSTER, admin)).status_code == 202
        assert (await post(job("mine"), submitter)).status_code == 202
        refused = problem(await post(job("theirs", queue="other"), submitter), 403, "forbidden")
        assert "team-a-ci (submitter: queues research; namespaces team-a)" in str(refused["detail"])
        problem(await post(job("peek"), viewer), 403, "forbidden")
        listed = (await api.get("/v1/jobs", headers=viewer)).json()["items"]
        assert [j["id"] for j in listed] == ["team-a/mine"]
        problem(await api.get("/v1/audit/preemptions", headers=viewer), 403, "forbidden")

        # Refused, each saying why: 401 with WWW-Authenticate.
        async def refused_because(token: str, why: str) -> None:
            answer = await api.get("/v1/queues", headers=bearer(token))
            body = problem(answer, 401, "unauthenticated")
            assert why in str(body["detail"]), body
            assert answer.headers["www-authenticate"].startswith("Bearer")

        ago = int(time.time()) - 7200
        await refused_because(sign(rsa_key, "rsa-1", sub="x", tephra_role="admin", iat=ago, exp=ago + 60),
                              "it has expired")  # fmt: skip
        await refused_because(sign(ed_key, "ed-1", sub="x", tephra_role="admin", exp=ago), "it has expired")
        await refused_because(
            sign(rsa_key, "rsa-1", sub="x", tephra_role="admin", iss="https://elsewhere/"),
            f"its issuer (iss) is not {ISSUER}",
        )
        await refused_because(
            sign(ed_key, "ed-1", sub="x", tephra_role="admin", aud="another-api"),
            f"its audience (aud) does not name {AUDIENCE}",
        )
        await refused_because(sign(rsa_key, "rsa-9", sub="x", tephra_role="admin"), "(kid) 'rsa-9' is not in")
        # Signed by another key under a known kid: RS256 and EdDSA.
        stranger_rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        await refused_because(sign(stranger_rsa, "rsa-1", sub="x", tephra_role="admin"), "signature")
        await refused_because(
            sign(ed25519.Ed25519PrivateKey.generate(), "ed-1", sub="x", tephra_role="admin"), "signature"
        )
        # An EdDSA token under the RSA key's kid: verified with that key's algorithm only.
        await refused_because(sign(ed_key, "rsa-1", sub="x", tephra_role="admin"), "alg")
        # Tampered claims: the signature no longer covers them.
        head, _, rest = admin["authorization"].removeprefix("Bearer ").partition(".")
        _, _, signature = rest.partition(".")
        forged = jwt.utils.base64url_encode(
            json.dumps(
                {"iss": ISSUER, "aud": AUDIENCE, "exp": 2**40, "sub": "x", "tephra_role": "admin"}
            ).encode()
        ).decode()
        await refused_because(f"{head}.{forged}.{signature}", "signature")
        await refused_because(
            sign(rsa_key, "rsa-1", sub="x", tephra_role="root"), "tephra_role claim is 'root'"
        )
        await refused_because(sign(rsa_key, "rsa-1", tephra_role="admin"), '"sub"')
        await refused_because(
            sign(rsa_key, "rsa-1", sub="x", tephra_role="submitter", tephra_queues="research"),
            "tephra_queues claim is not a list of strings",
        )
        problem(await api.get("/v1/queues"), 401, "unauthenticated")

        # Keys rotate without a restart: the RSA key leaves the file.
        jwks_settings(tmp_path / "jwks.json", ("ed-1", ed_key))
        await refused_because(admin["authorization"].removeprefix("Bearer "), "(kid) 'rsa-1' is not in")
        assert (await api.get("/v1/queues", headers=viewer)).status_code == 200


def test_a_jwks_file_needs_an_issuer_and_an_audience_and_usable_keys(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="TEPHRA_API_JWKS_FILE needs TEPHRA_API_JWT_ISSUER"):
        ApiSettings(api_jwks_file=tmp_path / "jwks.json", api_jwt_audience=AUDIENCE)
    path = tmp_path / "jwks.json"
    settings = ApiSettings(api_jwks_file=path, api_jwt_issuer=ISSUER, api_jwt_audience=AUDIENCE)
    with pytest.raises(ValueError, match=r"TEPHRA_API_JWKS_FILE: .*jwks\.json"):
        jwt_keys(settings)  # no file
    path.write_text(json.dumps({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "shared"}]}))
    with pytest.raises(ValueError, match="no public key with a kid"):
        jwt_keys(settings)  # a shared secret is no public key
