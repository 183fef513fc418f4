package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/ipclab/logagg/internal/jsonstr"
	"github.com/ipclab/logagg/internal/record"
)

type editKind uint8

const (
	editSet editKind = iota
	editRemove
	editRename
	editRedact
)

// edit is one change to a record's output line.
type edit struct {
	kind  editKind
	path  string
	find  *record.Paths // the path alone
	value []byte        // set: the JSON value; rename: the new name, quoted
	re    *regexp.Regexp
	mask  []byte
}

func (c *compiler) edits(sp Spec) []edit {
	var out []edit
	checkPath := func(field, p string) bool {
		switch {
		case p == "" || strings.Contains(p, "..") || strings.HasPrefix(p, ".") || strings.HasSuffix(p, "."):
			c.fail(field, "%q is not a member path like env or http.route", p)
		case p == "agg" || strings.HasPrefix(p, "agg."):
			c.fail(field, "%q: agg is the aggregator's own metadata; rules cannot change it", p)
		default:
			return true
		}
		return false
	}
	for _, a := range sp.Set {
		if !checkPath("set."+a.Path, a.Path) {
			continue
		}
		v, err := json.Marshal(a.Value)
		if err != nil {
			c.fail("set."+a.Path, "%v", err)
			continue
		}
		out = append(out, edit{kind: editSet, path: a.Path, find: record.CompilePaths(a.Path), value: v})
	}
	for _, p := range sp.Remove {
		if checkPath("remove", p) {
			out = append(out, edit{kind: editRemove, path: p, find: record.CompilePaths(p)})
		}
	}
	from := make([]string, 0, len(sp.Rename))
	for k := range sp.Rename {
		from = append(from, k)
	}
	sort.Strings(from)
	for _, p := range from {
		to := sp.Rename[p]
		if !checkPath("rename."+p, p) || !checkPath("rename."+p, to) {
			continue
		}
		if strings.Contains(to, ".") {
			c.fail("rename."+p, "%q: the new name is one member name, not a path", to)
			continue
		}
		q, _ := jsonstr.AppendEscaped(append([]byte(nil), '"'), []byte(to))
		out = append(out, edit{kind: editRename, path: p, find: record.CompilePaths(p), value: append(q, '"')})
	}
	for i, r := range sp.Redact {
		field := fmt.Sprintf("redact[%d]", i)
		p := r.Field
		if p == "" {
			p = "message"
		}
		if !checkPath(field+".field", p) {
			continue
		}
		if r.Regex == "" {
			c.fail(field+".regex", "required")
			continue
		}
		re, err := regexp.Compile(r.Regex)
		if err != nil {
			c.fail(field+".regex", "%v", err)
			continue
		}
		mask := r.Mask
		if mask == "" {
			mask = "***"
		}
		out = append(out, edit{kind: editRedact, path: p, find: record.CompilePaths(p), re: re, mask: []byte(mask)})
	}
	return out
}

// EditBuf is the working space of Edit: two buffers it alternates
// between. Its zero value is ready; it belongs to one goroutine.
type EditBuf struct{ a, b []byte }

// Edit applies the rule's edits to line, one JSON object and its newline
// as the encoder wrote it, and returns the result: line itself when
// nothing changed, else a slice of eb valid until eb is used again. An
// edit whose field is missing, or of another type, changes nothing. line
// may be the result of an earlier Edit with the same eb.
func (r *Rule) Edit(line []byte, eb *EditBuf) []byte {
	cur := line
	for i := range r.edits {
		dst := &eb.a
		if sameBacking(cur, eb.a) {
			dst = &eb.b
		}
		if out := r.edits[i].apply(cur, dst); out != nil {
			cur = out
		}
	}
	return cur
}

func sameBacking(x, y []byte) bool { return cap(x) > 0 && cap(y) > 0 && &x[:1][0] == &y[:1][0] }

// apply performs one edit into *dst; nil means nothing changed.
func (e *edit) apply(line []byte, dst *[]byte) []byte {
	var v [1]record.Value
	e.find.Find(line, v[:])
	val := v[0]
	if val.Kind == record.KindMissing {
		if e.kind == editSet && !strings.Contains(e.path, ".") {
			// A new top-level member goes first.
			i := bytes.IndexByte(line, '{')
			if i < 0 {
				return nil
			}
			out := append((*dst)[:0], line[:i+1]...)
			out = append(out, '"')
			out, _ = jsonstr.AppendEscaped(out, []byte(e.path))
			out = append(out, `":`...)
			out = append(out, e.value...)
			out = append(out, ',')
			out = append(out, line[i+1:]...)
			*dst = out
			return out
		}
		return nil
	}
	vs := offsetIn(line, val.Raw)
	ve := vs + len(val.Raw)
	switch e.kind {
	case editSet:
		return splice(dst, line, vs, ve, e.value)
	case editRedact:
		var tbuf []byte
		t, ok := val.Text(&tbuf)
		if !ok || !e.re.Match(t) {
			return nil
		}
		red := e.re.ReplaceAll(t, e.mask)
		q, _ := jsonstr.AppendEscaped(append([]byte(nil), '"'), red)
		return splice(dst, line, vs, ve, append(q, '"'))
	}
	ks, ke := keySpan(line, vs)
	if ks < 0 {
		return nil
	}
	if e.kind == editRename {
		return splice(dst, line, ks, ke, e.value)
	}
	// remove: the member and one comma next to it.
	end := skipBlank(line, ve)
	start := ks
	if end < len(line) && line[end] == ',' {
		end++
	} else {
		j := ks - 1
		for j >= 0 && isBlank(line[j]) {
			j--
		}
		if j >= 0 && line[j] == ',' {
			start = j
		}
		end = ve
	}
	return splice(dst, line, start, end, nil)
}

func splice(dst *[]byte, line []byte, start, end int, repl []byte) []byte {
	out := append((*dst)[:0], line[:start]...)
	out = append(out, repl...)
	out = append(out, line[end:]...)
	*dst = out
	return out
}

// offsetIn is where sub, a subslice of b, starts in b.
func offsetIn(b, sub []byte) int {
	return cap(b) - cap(sub)
}

// keySpan finds the quoted key before the value starting at vs: from its
// opening quote to after its closing one (keys we match hold no escapes).
func keySpan(line []byte, vs int) (int, int) {
	j := vs - 1
	for j >= 0 && isBlank(line[j]) {
		j--
	}
	if j < 0 || line[j] != ':' {
		return -1, -1
	}
	j--
	for j >= 0 && isBlank(line[j]) {
		j--
	}
	if j < 0 || line[j] != '"' {
		return -1, -1
	}
	open := bytes.LastIndexByte(line[:j], '"')
	if open < 0 {
		return -1, -1
	}
	return open, j + 1
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipBlank(b []byte, i int) int {
	for i < len(b) && isBlank(b[i]) {
		i++
	}
	return i
}
