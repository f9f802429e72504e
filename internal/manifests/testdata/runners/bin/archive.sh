#!/bin/sh
echo archived "$1" >&2
