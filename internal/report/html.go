package report

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"strings"
)

// PlotClass is the class of every plot's <figure>; tests and the inline
// script find plots by it.
const PlotClass = "plot"

// The inline script writes what the headless-browser test checks into the
// DOM: every plot's rendered size (data-rendered-size="WxH" on its figure)
// and, on <body>, data-plots (count), data-plots-zero (plots with a zero
// width or height), data-plots-unexplained (plots whose caption has no
// non-empty reading paragraph), data-page-height (px), data-tallest-section
// ("id px"), data-first-section (the first section's id),
// data-answers-bottom (px from the top of the page to the end of the
// answers section), data-answer-links (in-page links in it),
// data-broken-links (in-page links anywhere whose target does not exist),
// data-errors (script errors seen) and data-layout="done".
const headScript = `window.__reportErrors=[];
window.addEventListener('error',function(e){window.__reportErrors.push(String(e&&e.message||e));});`

const tailScript = `(function(){
var figs=document.querySelectorAll('figure.plot');var zero=0,unexplained=0;
for(var i=0;i<figs.length;i++){var f=figs[i];var el=f.querySelector('svg,img');
var r=el?el.getBoundingClientRect():{width:0,height:0};
f.setAttribute('data-rendered-size',Math.round(r.width)+'x'+Math.round(r.height));
if(!(r.width>0&&r.height>0))zero++;
var p=f.querySelector('figcaption p.reading');if(!p||!p.textContent.trim())unexplained++;}
var b=document.body;b.setAttribute('data-plots',String(figs.length));b.setAttribute('data-plots-zero',String(zero));
b.setAttribute('data-plots-unexplained',String(unexplained));
b.setAttribute('data-page-height',String(document.documentElement.scrollHeight));
var secs=document.querySelectorAll('section'),tall='',tallH=-1;
for(var j=0;j<secs.length;j++){var h=Math.round(secs[j].getBoundingClientRect().height);if(h>tallH){tallH=h;tall=secs[j].id;}}
b.setAttribute('data-tallest-section',tall+' '+tallH);
b.setAttribute('data-first-section',secs.length?secs[0].id:'');
var ans=document.getElementById('answers');
if(ans){b.setAttribute('data-answers-bottom',String(Math.round(ans.getBoundingClientRect().bottom+window.scrollY)));
b.setAttribute('data-answer-links',String(ans.querySelectorAll('a[href^="#"]').length));}
var links=document.querySelectorAll('a[href^="#"]'),broken=[];
for(var k=0;k<links.length;k++){var id=decodeURIComponent(links[k].getAttribute('href').slice(1));if(!id||!document.getElementById(id))broken.push(id);}
b.setAttribute('data-broken-links',String(broken.length));if(broken.length)b.setAttribute('data-broken-link-ids',broken.join(' '));
b.setAttribute('data-errors',String(window.__reportErrors.length));
if(window.__reportErrors.length)b.setAttribute('data-error-text',window.__reportErrors.join(' | '));
b.setAttribute('data-layout','done');})();`

const css = `body{font-family:"Liberation Sans",Arial,Helvetica,sans-serif;margin:0;color:#1d2330;background:#fafbfc}
header{background:#1d2330;color:#fff;padding:1rem 2rem}header h1{margin:0;font-size:1.6rem}header p{margin:.3rem 0 0;color:#c8cfdc}
nav{padding:.6rem 2rem;background:#eef1f6;border-bottom:1px solid #d8dde6;font-size:.9rem;line-height:1.7}
nav a{margin-right:1rem;color:#2a5bb0;text-decoration:none;white-space:nowrap}
main{padding:0 2rem 3rem;max-width:1500px}
section{margin-top:1.8rem;padding-top:.2rem;border-top:1px solid #d8dde6}
h2{font-size:1.3rem;margin:.8rem 0 .4rem}h3{font-size:1rem;margin:1rem 0 .3rem;color:#3b4458}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:.15rem .8rem;font-size:.85rem;margin:.4rem 0}
dl.meta dt{color:#5b6478}dl.meta dd{margin:0;font-family:"Liberation Mono",monospace;word-break:break-all}
.tablewrap{overflow-x:auto}
table{border-collapse:collapse;font-size:.82rem;margin:.3rem 0 .8rem;background:#fff}
th,td{border:1px solid #d8dde6;padding:.2rem .5rem;text-align:left;white-space:nowrap}
th{background:#eef1f6}td.num{text-align:right;font-variant-numeric:tabular-nums}
ul.notes{font-size:.88rem;color:#5a3e00;background:#fff8e6;border:1px solid #f0dfb0;padding:.5rem .5rem .5rem 1.8rem}
pre{background:#fff;border:1px solid #d8dde6;padding:.6rem;font-size:.78rem;overflow-x:auto}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(480px,1fr));gap:1rem;margin:.6rem 0}
figure.plot{margin:0;background:#fff;border:1px solid #d8dde6;padding:.4rem}
figure.plot.wide{grid-column:1/-1}
figure.plot svg{display:block;width:100%;height:auto}
figure.plot figcaption{font-size:.8rem;color:#5b6478;margin-top:.2rem}
figure.plot figcaption p.reading{margin:.2rem 0 0;color:#3b4458;line-height:1.35}
figure.plot .plot-error{color:#a02020;font-size:.85rem}
details{margin:.3rem 0;font-size:.85rem}
dl.answers{display:grid;grid-template-columns:16rem 1fr;gap:.45rem 1.2rem;margin:.6rem 0;font-size:.92rem;line-height:1.4}
dl.answers dt{font-weight:bold;color:#1d2330}dl.answers dd{margin:0}
dl.answers a{color:#2a5bb0;text-decoration:none;white-space:nowrap}
code{font-family:"Liberation Mono",monospace;font-size:.9em;background:#eef1f6;padding:0 .2em}`

// WriteHTML writes the self-contained HTML report: inline CSS, inline SVG
// plots and one small inline script; nothing is fetched when it is viewed.
func (r *Report) WriteHTML(w io.Writer) error {
	d := r.build()
	bw := bufio.NewWriter(w)
	e := html.EscapeString
	fmt.Fprintf(bw, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n")
	fmt.Fprintf(bw, "<title>%s</title>\n<style>\n%s\n</style>\n<script>\n%s\n</script>\n</head>\n<body>\n", e(d.title), css, headScript)
	fmt.Fprintf(bw, "<header><h1>%s</h1>", e(d.title))
	if d.subtitle != "" {
		fmt.Fprintf(bw, "<p>%s</p>", e(d.subtitle))
	}
	fmt.Fprintf(bw, "</header>\n<nav>")
	for _, s := range d.sections {
		fmt.Fprintf(bw, "<a href=\"#%s\">%s</a> ", e(s.id), e(s.title))
	}
	fmt.Fprintf(bw, "</nav>\n<main>\n")
	plotN := 0
	for _, s := range d.sections {
		fmt.Fprintf(bw, "<section id=\"%s\">\n<h2>%s</h2>\n", e(s.id), e(s.title))
		if len(s.answers) > 0 {
			bw.WriteString("<dl class=\"answers\">\n")
			for _, a := range s.answers {
				fmt.Fprintf(bw, "<dt>%s</dt><dd>%s", e(a.question), htmlCode(a.text))
				if a.link != "" {
					fmt.Fprintf(bw, " <a href=\"#%s\">→ %s</a>", e(a.link), e(a.linkText))
				}
				bw.WriteString("</dd>\n")
			}
			bw.WriteString("</dl>\n")
		}
		if len(s.meta) > 0 {
			bw.WriteString("<dl class=\"meta\">")
			for _, m := range s.meta {
				fmt.Fprintf(bw, "<dt>%s</dt><dd>%s</dd>", e(m.k), e(m.v))
			}
			bw.WriteString("</dl>\n")
		}
		if len(s.notes) > 0 {
			bw.WriteString("<ul class=\"notes\">")
			for _, n := range s.notes {
				fmt.Fprintf(bw, "<li>%s</li>", e(n))
			}
			bw.WriteString("</ul>\n")
		}
		for _, t := range s.tables {
			writeHTMLTable(bw, t)
		}
		if len(s.plots) > 0 {
			bw.WriteString("<div class=\"plots\">\n")
			for _, p := range s.plots {
				plotN++
				writeHTMLPlot(bw, fmt.Sprintf("%s-p%d", s.id, plotN), p)
			}
			bw.WriteString("</div>\n")
		}
		for _, p := range s.pres {
			fmt.Fprintf(bw, "<h3>%s</h3>\n<pre>%s</pre>\n", e(p.title), e(p.text))
		}
		for _, p := range s.details {
			fmt.Fprintf(bw, "<details><summary>%s</summary><pre>%s</pre></details>\n", e(p.title), e(p.text))
		}
		bw.WriteString("</section>\n")
	}
	fmt.Fprintf(bw, "</main>\n<script>\n%s\n</script>\n</body>\n</html>\n", tailScript)
	return bw.Flush()
}

// htmlCode escapes s and shows its `quoted` spans as code (s with an odd
// number of backticks is only escaped).
func htmlCode(s string) string {
	parts := strings.Split(html.EscapeString(s), "`")
	if len(parts)%2 == 0 {
		return html.EscapeString(s)
	}
	var b strings.Builder
	for i, p := range parts {
		if i%2 == 1 {
			p = "<code>" + p + "</code>"
		}
		b.WriteString(p)
	}
	return b.String()
}

func writeHTMLTable(w *bufio.Writer, t table) {
	e := html.EscapeString
	if t.caption != "" {
		fmt.Fprintf(w, "<h3>%s</h3>\n", e(t.caption))
	}
	if len(t.t.Rows) == 0 {
		w.WriteString("<p><em>no rows</em></p>\n")
		return
	}
	num := t.t.NumericColumns()
	w.WriteString("<div class=\"tablewrap\"><table>\n<thead><tr>")
	for _, h := range t.t.Header {
		fmt.Fprintf(w, "<th>%s</th>", e(h))
	}
	w.WriteString("</tr></thead>\n<tbody>\n")
	for _, row := range t.t.Rows {
		w.WriteString("<tr>")
		for i, c := range row {
			if i < len(num) && num[i] {
				fmt.Fprintf(w, "<td class=\"num\">%s</td>", e(c))
			} else {
				fmt.Fprintf(w, "<td>%s</td>", e(c))
			}
		}
		w.WriteString("</tr>\n")
	}
	w.WriteString("</tbody></table></div>\n")
}

func writeHTMLPlot(w *bufio.Writer, id string, p *plotSpec) {
	e := html.EscapeString
	cls := PlotClass
	if p.wide {
		cls += " wide"
	}
	pl, err := p.draw()
	var svg []byte
	if err == nil {
		svg, err = renderSVG(pl, p.w, p.h)
	}
	if err != nil {
		// Not a figure.plot: a plot that could not be drawn has no size to
		// check, and its error is shown where it would have been.
		fmt.Fprintf(w, "<div class=\"plot-missing\" id=\"%s\"><p class=\"plot-error\">%s: not drawn: %s</p></div>\n", e(id), e(p.title), e(err.Error()))
		return
	}
	fmt.Fprintf(w, "<figure class=\"%s\" id=\"%s\">\n", cls, e(id))
	w.Write(svg)
	fmt.Fprintf(w, "<figcaption><b>%s</b>", e(p.title))
	if p.reading != "" {
		fmt.Fprintf(w, "<p class=\"reading\">%s</p>", e(p.reading))
	}
	w.WriteString("</figcaption></figure>\n")
}
