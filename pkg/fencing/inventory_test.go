package fencing

import (
	"maps"
	"slices"

	"fenced.io/fenced/pkg/fencing/device"
)

// bmcInventory is an Inventory of the tests' own BMCs, one level each:
// what device.NewInventory builds from a configuration with only bmc
// entries.
type bmcInventory struct {
	bmcs      map[string]device.BMC
	endpoints map[string]string
}

// inventoryOf is an Inventory of the given drivers, keyed by node name,
// with the endpoints that name them in messages and evidence. The maps
// are copied.
func inventoryOf(bmcs map[string]device.BMC, endpoints map[string]string) Inventory {
	return &bmcInventory{bmcs: maps.Clone(bmcs), endpoints: maps.Clone(endpoints)}
}

func (i *bmcInventory) Nodes() []string { return slices.Sorted(maps.Keys(i.bmcs)) }

func (i *bmcInventory) Levels(node string) [][]device.Plug {
	b, ok := i.bmcs[node]
	if !ok {
		return nil
	}
	return [][]device.Plug{{device.BMCPlug(node, b, i.endpoints[node])}}
}

func (i *bmcInventory) Fenceable(node string) bool { return len(i.Levels(node)) > 0 }
