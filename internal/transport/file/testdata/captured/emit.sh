#!/bin/sh
# emit.sh: the program whose output the captured container logs hold.
# It runs under busybox sh. The test (captured_test.go) builds the same
# lines in Go; change one, change the other, and recapture (README.md).
#
# The runtime reads stdout and stderr from two pipes in no set order, so
# the script sleeps a little whenever it switches stream: the runtime then
# writes the lines in the order printed here.
pause() { sleep 0.2; }

printf 'out 1: hello from stdout\n'
printf 'out 2: second line\n'
printf 'out 3: third line\n'
pause
printf 'err 1: warning on stderr\n' >&2
printf 'err 2: second stderr line\n' >&2
pause
printf '\n'
printf 'utf8: Grüße, naïve café, 日本語, Ελληνικά, emoji \360\237\232\200\n'
# 6 + 8000*5 = 40006 bytes: "long: 0001.0002. ... 8000."
printf 'long: '; seq -w 1 8000 | tr '\n' '.'; printf '\n'
printf 'after long\n'
pause
# 5 + 4000*5 = 20005 bytes on stderr: "errl:0001,0002, ... 4000,"
printf 'errl:' >&2; seq -w 1 4000 | tr '\n' ',' >&2; printf '\n' >&2
pause
# 6 + 2000*10 = 20006 bytes, 3-byte characters: "wide: 0001日本0002日本..."
printf 'wide: '; seq -w 1 2000 | sed 's/$/日本/' | tr -d '\n'; printf '\n'
# exactly 16384 bytes: "edge:" + 16379 x
printf 'edge:'; head -c 16379 /dev/zero | tr '\0' 'x'; printf '\n'
printf '2024-05-01 12:00:00,123 ERROR [main] com.example.App - request failed\n'
printf 'java.lang.IllegalStateException: boom\n'
printf '\tat com.example.App.handle(App.java:42)\n'
printf '\tat com.example.App.main(App.java:10)\n'
printf 'Caused by: java.io.IOException: disk full\n'
printf '\tat com.example.Disk.write(Disk.java:7)\n'
printf '\t... 1 more\n'
printf '2024-05-01 12:00:01,000 INFO [main] com.example.App - recovered\n'
# A progress bar: carriage returns, and the newline only at the end. The
# pauses make the runtime read each step on its own.
printf 'progress 10%%\r'; pause; printf 'progress 50%%\r'; pause; printf 'progress 100%%\n'
printf 'crlf line\r\n'
printf '\033[31mred\033[0m and \033[1mbold\033[0m (ANSI colours)\n'
printf 'json specials: <tag> & "quotes" \\backslash\ttab\n'
pause
printf '\n' >&2
printf 'err 3: after an empty stderr line\n' >&2
pause
printf 'last line without newline'
