module github.com/latchkey/latchkey/backends/adaptertest

go 1.26.0

replace github.com/latchkey/latchkey => ../../

replace github.com/latchkey/latchkey/dbguard => ../../dbguard

replace github.com/latchkey/latchkey/echomw => ../../echomw

require (
	github.com/labstack/echo/v4 v4.16.0
	github.com/latchkey/latchkey v0.0.0-00010101000000-000000000000
	github.com/latchkey/latchkey/dbguard v0.0.0-00010101000000-000000000000
	github.com/latchkey/latchkey/echomw v0.0.0-00010101000000-000000000000
	github.com/robfig/cron/v3 v3.0.1
	modernc.org/sqlite v1.62.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/labstack/gommon v0.5.0 // indirect
	github.com/mattn/go-colorable v0.1.15 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fasttemplate v1.2.2 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/crypto v0.55.0 // indirect
	golang.org/x/net v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	golang.org/x/time v0.15.0 // indirect
	modernc.org/libc v1.80.1 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
)
