package config

import (
	"fmt"
	"io"
	"strings"
)

// Reference writes the settings table of docs/configuration.md: one row
// per setting, in declaration order.
func Reference(w io.Writer) {
	fmt.Fprintln(w, "| YAML key | flag | default | meaning |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, s := range Settings {
		key, fl := "—", "—"
		if s.Key != "" {
			key = "`" + s.Key + "`"
		}
		if s.Flag != "" {
			fl = "`--" + s.Flag
			if s.Arg != "" {
				fl += " " + s.Arg
			}
			fl += "`"
		}
		// Values read as code; "off" and phrases ("0 (no cap)") as text.
		def := s.DefaultText()
		if def != "" && def != "off" && def != "none" && !strings.Contains(def, " ") {
			def = "`" + def + "`"
		}
		doc := s.Doc
		if doc == "" {
			doc = s.Help
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", key, fl, def, strings.ReplaceAll(doc, "|", `\|`))
	}
}
