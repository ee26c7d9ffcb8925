"""A GitSync's spec.decryption: the SOPS keys of its Secret, read from the API server at every fetch.

`DecryptionKeys` is what `SourceOptions.decryption` calls (engine/loading.py) before each render: it GETs the
Secret with the source's own client, so a GitSync with `serviceAccountName` reads it AS that ServiceAccount
(a tenant never decrypts with a Secret its account may not read), and a rotated key is used by the next
fetch without a restart. Flux's layout (kustomize-controller): `*.agekey` entries hold age identities, `*.asc`
armored OpenPGP private keys (render/sops.py `from_secret`). Nothing is cached or written: the keys go to
`sops` in its environment (age) or into the render's private GNUPGHOME (OpenPGP), removed when the render
ends. A Secret that cannot be used raises DecryptionFailed naming it and why, never a value.
"""

from __future__ import annotations

import base64
import binascii

from gitops_sync.daemon.fleet.credentials import SecretReader
from gitops_sync.errors import DecryptionFailed
from gitops_sync.render import sops

KEY_SUFFIXES = (".agekey", ".asc")


class DecryptionKeys(SecretReader):
    """`()` -> the sops.Decryption of Secret `namespace/name`, read as `user` ("" = the controller itself);
    `name` "" (spec.decryption without secretRef): no keys, so an encrypted file fails naming it."""

    field = "spec.decryption.secretRef"

    def __call__(self) -> sops.Decryption:
        if not self.name:
            return sops.Decryption()
        data = self.data(DecryptionFailed)
        values: dict[str, bytes] = {}
        for key, raw in data.items():
            if not str(key).endswith(KEY_SUFFIXES) or not raw:
                continue
            try:
                values[str(key)] = base64.b64decode(str(raw), validate=True)
            except binascii.Error:
                raise DecryptionFailed(f"{self.where}: key {key} is not base64") from None
        return sops.from_secret(values, self.where)


__all__ = ["KEY_SUFFIXES", "DecryptionKeys"]
