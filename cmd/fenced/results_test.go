package main

import "fenced.io/fenced/pkg/admin"

// The -o json outputs of the power commands, as the tests decode them.
type (
	bmcResult    = admin.BMCResult
	deviceResult = admin.DeviceResult
)
