"""The update module's entry point: `python -m edgekit.ship.mender --root ROOT STATE FILES` (the script
`edgekit mender-module` installs in Mender's modules folder runs this)."""

from edgekit.ship.mender.module import main

raise SystemExit(main())
