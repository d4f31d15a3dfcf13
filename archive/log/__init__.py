"""The evidence log: a signed, timestamped, append-only Merkle log of every memento,
citation and deletion (docs/design.md, "The evidence log").

- :mod:`~archive.log.statements`: what a leaf attests (RFC 8785 JSON);
- :mod:`~archive.log.sequencer`: leaves sequenced in the writes' own transactions;
- :mod:`~archive.log.tree`: RFC 9162 tree over stored perfect subtrees, proofs;
- :mod:`~archive.log.signing`: the Ed25519 key and C2SP signed notes;
- :mod:`~archive.log.service`: integration, checkpoints, timestamps, proof documents;
- :mod:`~archive.log.audit`: ``amber log verify``;
- :mod:`~archive.log.proofcheck`: the offline verifier (stdlib, cryptography, rfc3161-client).

Nothing is imported here: the index imports the sequencer, and the rest imports the index.
"""
