package admin

import (
	"encoding/json"
	"io"

	"sigs.k8s.io/yaml"
)

// writeJSON is the -o json output of every command: v indented, one
// document ending in a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeYAML is the -o yaml output of every command that has one.
func writeYAML(w io.Writer, v any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
