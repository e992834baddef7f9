// Package printer is how every operator command prints its result, with
// kubectl's flags: -o json|yaml|name|jsonpath=…|jsonpath-as-json=…|
// go-template=…|custom-columns=…|wide, the command's own text by default,
// and --no-headers for its tables.
//
// fenced's results are plain Go structs, not API objects. JSON is their
// one serialisation: json and yaml print that document as it is (field
// names and order as the struct has them, so the scripts that parse them
// today keep working), and jsonpath, go-template and custom-columns query
// that same document, so a path found in -o json works in -o jsonpath.
// The document reaches cli-runtime's printers as a runtime.Unknown, the
// type those printers print verbatim; cli-runtime has no custom-columns
// printer (kubectl's lives in k8s.io/kubectl), so that one is here.
package printer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
)

// APIVersion is the apiVersion of the documents fenced prints (the
// configuration file's), in their TypeMeta.
const APIVersion = "fenced.io/v1alpha1"

// The formats that print a command's own text: the default, "text" (what
// the power commands and diagnose called their default before), and
// "wide" (more columns where a table has them).
const (
	FormatText = "text"
	FormatWide = "wide"
)

// customColumnsPrefix starts -o custom-columns=HEADER:PATH,…
const customColumnsPrefix = "custom-columns="

// Doc is a command's result as the printers see it.
type Doc struct {
	// Kind names the result ("Status"): its TypeMeta's kind.
	Kind string
	// Value is the result, marshalled to JSON for every format but text.
	Value any
	// Rows is the JSON field of Value whose elements are the rows of
	// custom-columns ("nodes"); empty: Value itself is the one row, or,
	// if it is a list, each of its elements.
	Rows string
	// NameKind and Names are -o name's output: one line NameKind/name
	// per name ("node/worker-3"), as kubectl prints objects.
	NameKind string
	Names    []string
	// Text writes the command's own output.
	Text func(w io.Writer, o TextOptions) error
}

// TextOptions are what the text output may vary.
type TextOptions struct {
	// Wide: -o wide, the tables' extra columns.
	Wide bool
	// NoHeaders: --no-headers, the tables without their header line.
	NoHeaders bool
}

// Flags are a command's output flags.
type Flags struct {
	print     *genericclioptions.PrintFlags
	noHeaders bool
}

// NewFlags returns the output flags with the text output as default.
func NewFlags() *Flags {
	return &Flags{print: genericclioptions.NewPrintFlags("")}
}

// ForFormat returns flags as if -o format had been given: for tests, and
// for callers that print without a command line.
func ForFormat(format string) *Flags {
	f := NewFlags()
	*f.print.OutputFormat = format
	return f
}

// AddFlags adds -o, --template, --allow-missing-template-keys,
// --show-managed-fields (cli-runtime's) and --no-headers to cmd.
func (f *Flags) AddFlags(cmd *cobra.Command) {
	f.print.AddFlags(cmd)
	cmd.Flags().Lookup("output").Usage = "output format: " + f.formats()
	// Our documents have no managedFields: the flag would do nothing.
	_ = cmd.Flags().MarkHidden("show-managed-fields")
	cmd.Flags().BoolVar(&f.noHeaders, "no-headers", false, "print tables without their header line (text, wide and custom-columns)")
	// Completion offers the formats, never file names.
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return append([]string{FormatText, FormatWide, "custom-columns="}, f.print.AllowedFormats()...), cobra.ShellCompDirectiveNoFileComp
	})
}

// Format is the -o given, "" for none.
func (f *Flags) Format() string { return *f.print.OutputFormat }

// IsText reports whether the command prints its own text (no -o, -o text
// or -o wide).
func (f *Flags) IsText() bool {
	switch f.Format() {
	case "", FormatText, FormatWide:
		return true
	}
	return false
}

// Validate checks the format and parses its template, so that a wrong -o
// is a usage error before the command does anything.
func (f *Flags) Validate() error {
	if f.IsText() {
		return nil
	}
	if spec, ok := strings.CutPrefix(f.Format(), customColumnsPrefix); ok {
		_, err := parseColumns(spec)
		return err
	}
	_, err := f.print.ToPrinter()
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		return fmt.Errorf("output format %q: want %s", f.Format(), f.formats())
	}
	return err
}

// Print writes d in the chosen format.
func (f *Flags) Print(w io.Writer, d Doc) error {
	if err := f.Validate(); err != nil {
		return err
	}
	if f.IsText() {
		return d.Text(w, TextOptions{Wide: f.Format() == FormatWide, NoHeaders: f.noHeaders})
	}
	raw, err := json.Marshal(d.Value)
	if err != nil {
		return err
	}
	if spec, ok := strings.CutPrefix(f.Format(), customColumnsPrefix); ok {
		cols, _ := parseColumns(spec) // checked by Validate
		return printColumns(w, cols, raw, d.Rows, f.noHeaders)
	}
	p, err := f.print.ToPrinter()
	if err != nil {
		return err
	}
	if jp, ok := p.(*printers.JSONPathPrinter); ok {
		// Its PrintObj decodes numbers as float64, which a filter such
		// as [?(@.level==2)] cannot compare with an integer: the
		// document goes to its JSONPath as decoded for unstructured
		// objects, integers as int64.
		doc, err := decode(raw)
		if err != nil {
			return err
		}
		return jp.Execute(w, doc)
	}
	switch {
	case f.Format() == "name":
		return p.PrintObj(nameList(d), w)
	case strings.HasPrefix(f.Format(), "go-template") && bytes.HasPrefix(bytes.TrimSpace(raw), []byte("[")):
		// cli-runtime's go-template printer takes an object, not a list:
		// a list result is offered as kubectl offers a List, .items.
		raw = append(append([]byte(`{"items":`), raw...), '}')
	}
	return p.PrintObj(&runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: APIVersion, Kind: d.Kind}, Raw: raw, ContentType: runtime.ContentTypeJSON}, w)
}

// decode reads a JSON document as apimachinery reads unstructured
// objects: integers as int64, other numbers as float64.
func decode(raw []byte) (any, error) {
	var doc any
	err := utiljson.Unmarshal(raw, &doc)
	return doc, err
}

// nameList is d's names as objects cli-runtime's name printer prints.
func nameList(d Doc) *unstructured.UnstructuredList {
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}}
	for _, n := range d.Names {
		// The core group's version: the printer writes "node/NAME", as
		// kubectl does for a Node, without a group suffix.
		list.Items = append(list.Items, unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": d.NameKind, "metadata": map[string]any{"name": n}}})
	}
	return list
}

// Print writes d in format: ForFormat(format).Print.
func Print(w io.Writer, format string, d Doc) error {
	return ForFormat(format).Print(w, d)
}

// formats lists the -o values, for the flag's help and its error.
func (f *Flags) formats() string {
	return "text (default), wide, " + strings.Join(slices.Sorted(slices.Values(f.print.AllowedFormats())), ", ") + ", custom-columns=HEADER:PATH,…"
}

// Table starts a table as every command prints one, columns two spaces
// apart, with its header line unless o.NoHeaders. Flush it when done.
func (o TextOptions) Table(w io.Writer, headers ...string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if !o.NoHeaders {
		fmt.Fprintln(tw, strings.Join(headers, "\t"))
	}
	return tw
}
