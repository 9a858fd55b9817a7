#!/usr/bin/env sh
# Install (or remove) Memory Studio's desktop entry and icons for the current user.
#
#   packaging/install-desktop.sh [--exec PATH]    # from a source checkout or an unpacked bundle
#   packaging/install-desktop.sh --uninstall
#
# Files go under ${XDG_DATA_HOME:-~/.local/share}: applications/memory-studio.desktop and
# icons/hicolor/<size>/apps/memory-studio.{png,svg}. Without --exec the entry starts the bundle this
# script sits in (<bundle>/memory-studio), else the checkout's .venv/bin/memory-studio, else the
# `memory-studio` found on PATH.
set -eu

APP_ID=memory-studio
SIZES="16 24 32 48 64 128 256 512"
DATA_HOME=${XDG_DATA_HOME:-"$HOME/.local/share"}
APPS="$DATA_HOME/applications"
ICONS="$DATA_HOME/icons/hicolor"
HERE=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)

usage() {
    echo "usage: $0 [--exec PATH] | --uninstall" >&2
    exit 2
}

refresh_caches() {
    # Desktops pick up new entries by themselves; these only make it immediate. Absent tools are fine.
    command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database -q "$APPS" 2>/dev/null || true
    command -v gtk-update-icon-cache >/dev/null 2>&1 && gtk-update-icon-cache -q -t "$ICONS" 2>/dev/null || true
}

EXEC=""
MODE=install
while [ $# -gt 0 ]; do
    case "$1" in
        --exec) [ $# -ge 2 ] || usage; EXEC=$2; shift 2 ;;
        --exec=*) EXEC=${1#--exec=}; shift ;;
        --uninstall) MODE=uninstall; shift ;;
        -h|--help) usage ;;
        *) echo "unknown option: $1" >&2; usage ;;
    esac
done

if [ "$MODE" = uninstall ]; then
    rm -f "$APPS/$APP_ID.desktop" "$ICONS/scalable/apps/$APP_ID.svg"
    for n in $SIZES; do rm -f "$ICONS/${n}x${n}/apps/$APP_ID.png"; done
    refresh_caches
    echo "Removed the Memory Studio desktop entry and icons from $DATA_HOME"
    exit 0
fi

# resources/ beside this script (bundle: <bundle>/_internal/resources) or one level up (checkout).
RES=""
for candidate in "$HERE/_internal/resources" "$HERE/resources" "$HERE/../resources"; do
    if [ -f "$candidate/$APP_ID.desktop" ]; then RES=$(CDPATH= cd -- "$candidate" && pwd); break; fi
done
if [ -z "$RES" ]; then
    echo "error: cannot find resources/$APP_ID.desktop next to $HERE; run this script from a source checkout or an unpacked bundle" >&2
    exit 1
fi

if [ -z "$EXEC" ]; then
    if [ -x "$HERE/$APP_ID" ] && [ -f "$HERE/$APP_ID" ]; then
        EXEC="$HERE/$APP_ID"
    elif [ -x "$HERE/../.venv/bin/$APP_ID" ] && [ -f "$HERE/../.venv/bin/$APP_ID" ]; then
        # A source checkout after `make install`: its venv, which is rarely on PATH.
        EXEC="$(CDPATH= cd -- "$HERE/../.venv/bin" && pwd)/$APP_ID"
    elif command -v "$APP_ID" >/dev/null 2>&1; then
        EXEC=$(command -v "$APP_ID")
    else
        echo "error: no $APP_ID program found: pass --exec /path/to/$APP_ID (the bundle's executable or a venv's bin/$APP_ID)" >&2
        exit 1
    fi
fi
case "$EXEC" in
    /*) ;;
    *) EXEC="$(pwd)/$EXEC" ;;
esac
if [ ! -x "$EXEC" ]; then
    echo "error: $EXEC is not an executable file" >&2
    exit 1
fi

mkdir -p "$APPS" "$ICONS/scalable/apps"
# The Desktop Entry spec quotes an Exec program that contains spaces; TryExec takes the bare path.
SED_EXEC=$(printf '%s' "$EXEC" | sed -e 's/[\\|&]/\\&/g')
sed -e "s|^Exec=.*|Exec=\"$SED_EXEC\"|" -e "s|^TryExec=.*|TryExec=$SED_EXEC|" \
    "$RES/$APP_ID.desktop" > "$APPS/$APP_ID.desktop.tmp"
mv "$APPS/$APP_ID.desktop.tmp" "$APPS/$APP_ID.desktop"
cp "$RES/icons/$APP_ID.svg" "$ICONS/scalable/apps/$APP_ID.svg"
for n in $SIZES; do
    mkdir -p "$ICONS/${n}x${n}/apps"
    cp "$RES/icons/$APP_ID-$n.png" "$ICONS/${n}x${n}/apps/$APP_ID.png"
done
refresh_caches
echo "Installed $APPS/$APP_ID.desktop (runs $EXEC) and icons under $ICONS"
