"""Shipping with Mender: a signed pack as a `.mender` artifact (`artifact`), and the update module
`edgekit-bundle` that maps Mender's states onto edgekit's install, keep and rollback (`module`).

    ArtifactInstall   edgekit install PACK: a new slot, verified under the box's trust policy, smoke-tested,
                      then switched (a refusal fails the state, and Mender rolls back: nothing was switched)
    ArtifactCommit    keep: the slot is still current and verifies again; edgekit.service, where systemd runs
                      it, restarts and stays active (a failure here fails the commit)
    ArtifactRollback  edgekit rollback, if this deployment switched
    NeedsArtifactReboot: No. SupportsRollback: Yes. The other states have nothing to do.
"""
