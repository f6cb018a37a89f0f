# Install-time helper (install(CODE) includes it): copies FM_SRC to FM_DEST_DIR under the install
# prefix, rewriting the absolute paths it contains for that prefix, so that
# `cmake --install build` (prefix /usr/local) installs units that run /usr/local/bin/... and
# read /usr/local/etc/fabricmon/..., while the packages (prefix /usr) keep the source text
# unchanged: /usr/bin/..., /etc/fabricmon/....
#
# In: FM_SRC (file), FM_DEST_DIR (relative to the prefix, or absolute), FM_NAME (installed name),
#     FM_STAGE (a scratch dir in the build tree), FM_MODE (optional: e.g. "OWNER_READ ..." list).
# Uses CMAKE_INSTALL_PREFIX and DESTDIR as the install sets them.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(_fm_etc "/etc")
else()
  set(_fm_etc "${CMAKE_INSTALL_PREFIX}/etc")
endif()
file(READ "${FM_SRC}" _fm_text)
string(REPLACE "/usr/bin/" "${CMAKE_INSTALL_PREFIX}/bin/" _fm_text "${_fm_text}")
string(REPLACE "/usr/share/" "${CMAKE_INSTALL_PREFIX}/share/" _fm_text "${_fm_text}")
string(REPLACE "/etc/fabricmon/" "${_fm_etc}/fabricmon/" _fm_text "${_fm_text}")
string(MD5 _fm_key "${CMAKE_INSTALL_PREFIX}|$ENV{DESTDIR}")
set(_fm_staged "${FM_STAGE}/${_fm_key}/${FM_NAME}")
file(WRITE "${_fm_staged}" "${_fm_text}")
if(IS_ABSOLUTE "${FM_DEST_DIR}")
  set(_fm_dest "${FM_DEST_DIR}")
else()
  set(_fm_dest "${CMAKE_INSTALL_PREFIX}/${FM_DEST_DIR}")
endif()
# file(INSTALL) prepends DESTDIR and records the file in install_manifest.txt.
file(INSTALL DESTINATION "${_fm_dest}" TYPE FILE
     PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
     FILES "${_fm_staged}")
