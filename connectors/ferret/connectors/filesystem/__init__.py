"""Filesystem source: a folder of txt, md, rst, csv, html, pdf, docx, pptx and xlsx files (office formats need
ferret[office])."""

from ferret.connectors.filesystem.connector import FilesystemConfig, FilesystemConnector

__all__ = ["FilesystemConfig", "FilesystemConnector"]
