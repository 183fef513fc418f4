package report

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
)

// chromiumPath finds Debian's chromium (scripts/setup.sh installs it).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	return testenv.RequireCommand(t, "chromium")
}

// runChromium opens file in a fresh headless profile with no network
// features and returns stdout and the stderr log.
func runChromium(t *testing.T, bin, file string, extra ...string) (string, string) {
	t.Helper()
	profile := t.TempDir()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + profile, "--enable-logging=stderr", "--v=0"}
	args = append(args, extra...)
	args = append(args, "file://"+file)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\nstderr:\n%s", extra, err, tail(errb.String(), 3000))
	}
	return out.String(), errb.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// consoleErrors returns chromium's log lines about page console errors or
// uncaught exceptions. Chromium logs console messages as
// `[...:INFO:CONSOLE(line)] "message", source: URL (line)`, whatever
// the level, so errors are recognised by their text.
func consoleErrors(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, "CONSOLE") {
			continue
		}
		if strings.Contains(l, "ERROR:CONSOLE") || strings.Contains(l, "Uncaught") || strings.Contains(l, "Error") || strings.Contains(l, "Failed to load") {
			out = append(out, l)
		}
	}
	return out
}

var (
	reBodyAttr = regexp.MustCompile(`<body[^>]*>`)
	reSize     = regexp.MustCompile(`data-rendered-size="(\d+)x(\d+)"`)
	reH2       = regexp.MustCompile(`<h2>([^<]*)</h2>`)
)

func attr(tag, name string) string {
	m := regexp.MustCompile(name + `="([^"]*)"`).FindStringSubmatch(tag)
	if m == nil {
		return ""
	}
	return m[1]
}

func writeFixtureHTML(t *testing.T, inject string) string {
	t.Helper()
	h := renderHTML(t, fixtureReport(t))
	if inject != "" {
		h = strings.Replace(h, "</main>", inject+"</main>", 1)
	}
	file := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(file, []byte(h), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// The fixture report is a page to scroll through, not to get lost in: at
// 1200 px wide it measured 22,800 px, its tallest section 5,700 px, when
// these bounds were set. A trace section had grown to 43,539 px when
// every map was a plot of its own.
const (
	maxPageHeight    = 30000
	maxSectionHeight = 8000
	// answersScreen is one screen: the answers section must end within
	// the first 1000 px of the page (header and navigation included).
	answersScreen = 1000
)

// TestChromiumRendersReport opens the fixture report in headless Chromium:
// the DOM (after scripts ran) must hold every section, every plot must have
// a non-zero laid-out size, and neither the page's error hook nor
// Chromium's console log may show an error. A screenshot must be a real
// picture, not a blank page.
func TestChromiumRendersReport(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	bin := chromiumPath(t)
	file := writeFixtureHTML(t, "")

	dom, log := runChromium(t, bin, file, "--dump-dom", "--window-size=1200,3000")
	body := reBodyAttr.FindString(dom)
	if attr(body, "data-layout") != "done" {
		t.Fatalf("the inline script did not run; <body> is %q\n%s", body, tail(log, 2000))
	}
	if got := attr(body, "data-plots"); got != strconv.Itoa(fixturePlots) {
		t.Errorf("browser counted %s plots, want %d", got, fixturePlots)
	}
	if got := attr(body, "data-plots-zero"); got != "0" {
		t.Errorf("%s plots have zero size", got)
	}
	if got := attr(body, "data-errors"); got != "0" {
		t.Errorf("%s script errors: %s", got, attr(body, "data-error-text"))
	}
	// Every figure's caption has a reading paragraph the browser can see:
	// the count the browser finds without one must be the count of plots
	// built without a reading, which TestEveryPlotSaysWhatItShows wants 0.
	unexplained := len(plotsWithoutReading(fixtureReport(t).build()))
	if got := attr(body, "data-plots-unexplained"); got != strconv.Itoa(unexplained) {
		t.Errorf("browser found %s figures without a reading paragraph, the report built %d", got, unexplained)
	}
	if h, _ := strconv.Atoi(attr(body, "data-page-height")); h <= 3000 || h > maxPageHeight {
		t.Errorf("the page is %d px tall at 1200 px wide, want 3000 < h <= %d", h, maxPageHeight)
	}
	if f := strings.Fields(attr(body, "data-tallest-section")); len(f) != 2 {
		t.Errorf("data-tallest-section = %q", attr(body, "data-tallest-section"))
	} else if h, _ := strconv.Atoi(f[1]); h > maxSectionHeight {
		t.Errorf("section %s is %d px tall at 1200 px wide, want at most %d", f[0], h, maxSectionHeight)
	}
	// The answers open the page and fit on one screen of a 1200×1000
	// window, and every in-page link (the answers', the navigation's)
	// lands on an element that exists.
	if got := attr(body, "data-first-section"); got != AnswersID {
		t.Errorf("first section is %q, want %q", got, AnswersID)
	}
	if b, _ := strconv.Atoi(attr(body, "data-answers-bottom")); b <= 0 || b > answersScreen {
		t.Errorf("the answers end %d px down the page, want them on the first screen (<= %d px)", b, answersScreen)
	}
	if n, _ := strconv.Atoi(attr(body, "data-answer-links")); n != len(questions) {
		t.Errorf("the answers hold %d in-page links, want %d (one per question)", n, len(questions))
	}
	if got := attr(body, "data-broken-links"); got != "0" {
		t.Errorf("%s in-page links lead nowhere: %s", got, attr(body, "data-broken-link-ids"))
	}
	sizes := reSize.FindAllStringSubmatch(dom, -1)
	if len(sizes) != fixturePlots {
		t.Errorf("%d plots carry a rendered size, want %d", len(sizes), fixturePlots)
	}
	for _, m := range sizes {
		w, _ := strconv.Atoi(m[1])
		h, _ := strconv.Atoi(m[2])
		if w < 100 || h < 100 {
			t.Errorf("plot rendered at %dx%d px", w, h)
		}
	}
	var heads []string
	for _, m := range reH2.FindAllStringSubmatch(dom, -1) {
		heads = append(heads, m[1])
	}
	for _, want := range []string{"Answers", "Calibration", "Host", "Runs", "rtt: ", "rtt samples: ", "latency: ", "bufsweep: ", "throughput: ", "peers: ", "trace: "} {
		found := false
		for _, h := range heads {
			found = found || strings.HasPrefix(h, want)
		}
		if !found {
			t.Errorf("rendered DOM lacks a %q section (headings %q)", want, heads)
		}
	}
	if errs := consoleErrors(log); len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}

	shot := filepath.Join(t.TempDir(), "shot.png")
	runChromium(t, bin, file, "--screenshot="+shot, "--window-size=1200,3000", "--hide-scrollbars")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	b := img.Bounds()
	if b.Dx() != 1200 || b.Dy() != 3000 {
		t.Fatalf("screenshot is %dx%d, want 1200x3000", b.Dx(), b.Dy())
	}
	// A blank or unstyled page has a handful of colours; tables, the dark
	// header and the plots' colours and anti-aliasing give hundreds.
	colours := map[uint32]bool{}
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[(r>>8)<<16|(g>>8)<<8|bl>>8] = true
		}
	}
	if len(colours) < 100 {
		t.Errorf("screenshot has only %d colours: the page did not render", len(colours))
	}
}

// TestChromiumSeesErrors proves the checks above can fail: a report with a
// broken script must show up both in the page's error hook and in the
// console log.
func TestChromiumSeesErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	bin := chromiumPath(t)
	file := writeFixtureHTML(t, "<script>thisFunctionDoesNotExist();</script>\n")
	dom, log := runChromium(t, bin, file, "--dump-dom")
	body := reBodyAttr.FindString(dom)
	if attr(body, "data-errors") != "1" || !strings.Contains(attr(body, "data-error-text"), "thisFunctionDoesNotExist") {
		t.Errorf("error hook did not see the broken script: <body> %q", body)
	}
	if len(consoleErrors(log)) == 0 {
		t.Errorf("console log shows no error for a broken script:\n%s", tail(log, 2000))
	}
}
