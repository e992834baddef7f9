package printer

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"

	"k8s.io/client-go/util/jsonpath"
)

// column is one HEADER:PATH of -o custom-columns.
type column struct {
	header string
	path   *jsonpath.JSONPath
}

// parseColumns parses "HEADER:PATH,HEADER:PATH". A PATH is a JSONPath
// with or without its braces (".name" or "{.name}"), as kubectl takes it.
func parseColumns(spec string) ([]column, error) {
	if spec == "" {
		return nil, fmt.Errorf("custom-columns: want HEADER:PATH[,HEADER:PATH…]")
	}
	var cols []column
	for _, part := range strings.Split(spec, ",") {
		header, path, ok := strings.Cut(part, ":")
		if !ok || header == "" || path == "" {
			return nil, fmt.Errorf("custom-columns: %q: want HEADER:PATH", part)
		}
		if !strings.HasPrefix(path, "{") {
			path = "{" + path + "}"
		}
		p := jsonpath.New(header).AllowMissingKeys(true)
		if err := p.Parse(path); err != nil {
			return nil, fmt.Errorf("custom-columns: %s: %w", header, err)
		}
		cols = append(cols, column{header: header, path: p})
	}
	return cols, nil
}

// printColumns prints one row per element of raw's field rows (raw itself
// when rows is empty: each element of a list, or the one object).
func printColumns(w io.Writer, cols []column, raw []byte, rows string, noHeaders bool) error {
	doc, err := decode(raw)
	if err != nil {
		return err
	}
	if obj, ok := doc.(map[string]any); ok && rows != "" {
		doc = obj[rows]
	}
	items, ok := doc.([]any)
	if !ok {
		items = []any{doc}
	}
	headers := make([]string, len(cols))
	for i, c := range cols {
		headers[i] = c.header
	}
	tw := TextOptions{NoHeaders: noHeaders}.Table(w, headers...)
	for _, item := range items {
		cells := make([]string, len(cols))
		for i, c := range cols {
			cell, err := cellOf(c.path, item)
			if err != nil {
				return err
			}
			cells[i] = cell
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// cellOf is what path finds in item, several values comma-separated, and
// "<none>" for nothing, as kubectl's custom columns print them.
func cellOf(path *jsonpath.JSONPath, item any) (string, error) {
	results, err := path.FindResults(item)
	if err != nil {
		return "", err
	}
	var vals []string
	for _, set := range results {
		for _, v := range set {
			if s := valueText(v); s != "" {
				vals = append(vals, s)
			}
		}
	}
	if len(vals) == 0 {
		return "<none>", nil
	}
	return strings.Join(vals, ","), nil
}

// valueText prints a scalar as it is and anything else as JSON.
func valueText(v reflect.Value) string {
	for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Map, reflect.Slice:
		b, err := json.Marshal(v.Interface())
		if err != nil {
			return fmt.Sprint(v.Interface())
		}
		return string(b)
	}
	return fmt.Sprint(v.Interface())
}
