"""Shipping through OCI registries: a signed bundle as a CNCF ModelPack artifact (`layout`), pushed
(`push`), pulled into a box's slot with resume and delta (`pull`, used by `edgekit.ship.install`) or into
a pack to carry by hand (`carry`); references (`reference`), credentials (`credentials`) and the
distribution API (`client`)."""
