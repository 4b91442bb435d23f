#!/usr/bin/env bash
# Install the TeX toolchain dtgen compiles with, if any piece is missing (Debian/Ubuntu).
set -euo pipefail
# latexmk: the OpenTikZ template check. latex-cjk-chinese and the Arphic fonts: Chinese and Japanese labels (CJKutf8).
PACKAGES="texlive-latex-base texlive-latex-recommended texlive-latex-extra texlive-pictures texlive-fonts-recommended lmodern dvisvgm poppler-utils latexmk latex-cjk-chinese fonts-arphic-uming fonts-arphic-ukai"
missing=0
for tool in pdflatex latex dvisvgm pdftoppm pdftotext pdftocairo pdfinfo latexmk; do
  command -v "$tool" >/dev/null 2>&1 || missing=1
done
kpsewhich standalone.cls pgfplots.sty CJKutf8.sty c70gbsn.fd >/dev/null 2>&1 || missing=1
[ "$missing" = 0 ] && exit 0
if [ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null 2>&1; then
  echo "dtgen needs TeX: apt-get install $PACKAGES" >&2
  exit 1
fi
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
echo "Installing TeX (about a minute): $PACKAGES"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $PACKAGES >/dev/null
