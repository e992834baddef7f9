package deploy

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/pkg/config"
)

// updateSchema rewrites the chart schema's generated definitions instead of
// comparing them.
var updateSchema = flag.Bool("update-schema", false, "rewrite the definitions of "+chartDir+"/values.schema.json from pkg/config's types")

// schemaSections are the sections of the configuration file the chart's
// values carry, by the definition name the schema's hand-written part
// refers to.
var schemaSections = map[string]reflect.Type{
	"GossipSpec":      reflect.TypeFor[config.GossipSpec](),
	"ShutdownSpec":    reflect.TypeFor[config.ShutdownSpec](),
	"PolicySpec":      reflect.TypeFor[config.PolicySpec](),
	"FencerSpec":      reflect.TypeFor[config.FencerSpec](),
	"BMCInventory":    reflect.TypeFor[config.BMCInventory](),
	"FenceDeviceSpec": reflect.TypeFor[config.FenceDeviceSpec](),
	"TopologySpec":    reflect.TypeFor[config.TopologySpec](),
	"WatchdogSpec":    reflect.TypeFor[config.WatchdogSpec](),
}

// chartManaged are the fields the chart writes itself, so the values may
// not: the gossip keys' path (where it mounts the Secret) and the lease
// namespace (the release namespace, where its Role is). refused are the
// fields the file format has only to refuse with a better message: an
// inline password.
var (
	chartManaged = map[reflect.Type][]string{
		reflect.TypeFor[config.GossipSpec](): {"keyFile", "keyDir"},
		reflect.TypeFor[config.FencerSpec](): {"leaseNamespace"},
	}
	refused = map[string]bool{"password": true}
)

// secretOptionName is what a fence agent option holding a secret is called
// (password, passwd, community, snmp_priv_passwd…): fenceDevices[].options
// refuses them, secretOptions takes them from a file.
const secretOptionName = "(?i)(passw|community|secret)"

// TestChartSchemaFollowsTheConfiguration: the chart schema's definitions
// of the configuration sections are what pkg/config's types decode —
// every field, no other (a misspelt key fails at helm install, as it would
// at the agent's start, but before anything reaches the cluster), no
// inline password. -update-schema rewrites them.
func TestChartSchemaFollowsTheConfiguration(t *testing.T) {
	file := path(t, chartDir, "values.schema.json")
	raw := readFile(t, chartDir, "values.schema.json")
	var schema map[string]any
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	defs, _ := schema["definitions"].(map[string]any)
	if defs == nil {
		defs = map[string]any{}
	}
	for name, typ := range schemaSections {
		defs[name] = schemaOf(typ)
	}
	schema["definitions"] = defs
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(schema); err != nil {
		t.Fatal(err)
	}
	if *updateSchema {
		if err := os.WriteFile(file, want.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(raw, want.Bytes()) {
		t.Errorf("%s/values.schema.json is not what pkg/config's types say (or not formatted as the generator writes it): "+
			"go test ./test/deploy -run TestChartSchemaFollowsTheConfiguration -update-schema", chartDir)
	}
}

var durationType = reflect.TypeFor[metav1.Duration]()

// schemaOf is the JSON schema of what decodes into t, strictly: objects
// have exactly their fields.
func schemaOf(t reflect.Type) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == durationType:
		return map[string]any{"type": "string", "pattern": `^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$`}
	case t == reflect.TypeFor[config.PlugSpec]():
		// PlugSpec.UnmarshalJSON: a device name, or {device, plug}.
		return map[string]any{"anyOf": []any{map[string]any{"type": "string", "minLength": 1}, structSchema(t)}}
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaOf(t.Elem())}
	case reflect.Struct:
		return structSchema(t)
	}
	panic("no schema for " + t.String())
}

func structSchema(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	addFields(t, props, &required)
	s := map[string]any{"type": "object", "additionalProperties": false, "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// addFields adds t's fields (inline ones flattened) by their YAML names.
func addFields(t reflect.Type, props map[string]any, required *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" && (f.Anonymous || strings.Contains(opts, "inline")) {
			addFields(f.Type, props, required)
			continue
		}
		if refused[name] || slices.Contains(chartManaged[t], name) {
			continue
		}
		s := schemaOf(f.Type)
		switch {
		case name == "port":
			s["minimum"], s["maximum"] = 1, 65535
		case name == "options" && f.Type.Kind() == reflect.Map:
			s["propertyNames"] = map[string]any{"not": map[string]any{"pattern": secretOptionName}}
			s["description"] = "a secret (password, community…) goes in secretOptions, as a file"
		}
		props[name] = s
		if !strings.Contains(opts, "omitempty") {
			*required = append(*required, name)
		}
	}
}
